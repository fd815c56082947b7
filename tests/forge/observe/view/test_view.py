"""``forge view``: the pages over a recorded run (written by the real ReplayBuffer, as a run
writes it), in real headless Chromium through Playwright, showing the run's own numbers; live
while the run appends; a run of 10,000 episodes opened through the index.

Screenshots of each page are kept in ``$FORGE_TEST_ARTIFACTS/view`` (default
``/tmp/forge-test-artifacts/view``)."""

from __future__ import annotations

import functools
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.testclient import TestClient

from actors.replay_buffer import ReplayBuffer
from forge.harnesses.gui_actions import find_chromium
from forge.observe.view.app import build_app
from forge.observe.view.index import RunIndex
from forge.trajectory import assemble
from forge.types import Episode, Turn, image_part

ARTIFACTS = Path(os.environ.get("FORGE_TEST_ARTIFACTS", "/tmp/forge-test-artifacts")) / "view"
STEPS = [
    {"step": 0, "eval_pass_rate": 0.25},
    *[
        {"step": s, "reward_mean": r, "pass_rate": r, "loss": 0.1 / s, "entropy": 1.0 - r / 2,
         "logprob_kl": 1e-6, "staleness_max": 0, "train_tokens_per_s": 1000.0 + s,
         "grad_norm": 0.5, "policy_version": s, "logprob_abs_diff_max": 2e-6}
        for s, r in ((1, 0.25), (2, 0.5), (3, 0.75))
    ],
]  # fmt: skip


@functools.cache
def _tokenizer() -> Any:
    from serve.models import load_tokenizer

    return load_tokenizer("tiny")  # the model config.yaml names: the view decodes with it


def _ids(text: str) -> list[int]:
    return list(_tokenizer()(text, add_special_tokens=False).input_ids)


def _episode(eid: str, version: int, reward: float, word: str) -> Episode:
    """A two-turn react episode: a shell call, then the answer; its segment merges both."""
    call = {"id": "c1", "name": "shell", "arguments": json.dumps({"command": "cat tag.txt"})}
    first = [{"role": "user", "content": "Reply with the word in tag.txt."}]
    second = [*first, {"role": "assistant", "tool_calls": [{"id": "c1", "function": call}]},
              {"role": "tool", "tool_call_id": "c1", "content": f"stdout:\n{word}"}]  # fmt: skip
    p1, c1 = _ids("<user>Reply with the word in tag.txt."), _ids("<call>cat tag.txt")
    p2, c2 = [*p1, *c1, *_ids(f"<tool>{word}")], _ids(word)
    turns = [
        Turn(eid, 0, 0, "chat", {"messages": first}, p1, c1, [-0.1] * len(c1), "<call>",
             [call], "tool_calls", version, 0.1, time.time()),
        Turn(eid, 0, 1, "chat", {"messages": second}, p2, c2, [-2.0] * len(c2), word, [],
             "stop", version, 0.1, time.time()),
    ]  # fmt: skip
    segments, resets = assemble(turns)
    return Episode(eid, "read_word", 0, "react", reward, "ok", final_answer=word, turns=turns,
                   segments=segments, reset_reasons=resets, verifier_detail="ok",
                   verifier_outputs={"test-stdout.txt": f"test_{word} PASSED"})  # fmt: skip


def _gui_episode() -> Episode:
    """A GUI turn: a screenshot in the request, a click on it."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (640, 480), "white").save(buf, format="PNG")
    image = image_part(buf.getvalue(), "image/png")
    call = {"id": "c1", "name": "click", "arguments": json.dumps({"x": 500, "y": 500})}
    turn = Turn("e-gui", 0, 0, "chat", {"messages": [{"role": "user", "content": "Press Go"}]},
                _ids("<screen>"), _ids("<click>"), [-0.5] * len(_ids("<click>")), "", [call],
                "tool_calls", 2, 0.1, time.time(), images=[image.sha256])  # fmt: skip
    segments, _ = assemble([turn])
    return Episode("e-gui", "press_go", 0, "browser", 1.0, "ok", turns=[turn],
                   segments=segments, images={image.sha256: image})  # fmt: skip


def record_run(run_dir: Path) -> dict[str, float]:
    """A run's files as the driver and the ReplayBuffer write them: 3 steps, 13 episodes in 4
    groups (one with equal rewards, one of a GUI episode with its screenshot), a dropped group
    and a failed attempt."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text("policy: {engine: {name: torch, model: tiny}}\n")
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in STEPS))
    buffer = ReplayBuffer(str(run_dir), 16, 8)
    rewards = {0: [0.0, 1.0, 0.0, 0.0], 1: [1.0, 1.0, 1.0, 1.0], 2: [1.0, 0.0, 1.0, 1.0]}
    for v, rs in rewards.items():
        group = [_episode(f"e{v}{i}", v, r, "gita" if r else "nope") for i, r in enumerate(rs)]
        buffer.record([("put", group, f"g{v}")])
    buffer.record([("put", [_gui_episode()], "g-gui")])
    lost = _episode("e-lost", 2, 0.0, "x")
    buffer.record([("drop", [lost], "g-lost", "sandbox_error after 2 retries")])
    failed = Episode("e-fail", "read_word", 1, "react", 0.0, "failed", failure="pod_died")
    buffer.record([("failure", failed, "g2", "pod_died")])
    buffer.close()
    return {"episodes": 13, "last_reward": 0.75}


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    run_dir = tmp_path_factory.mktemp("runs") / "demo"
    record_run(run_dir)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_app(run_dir), port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", run_dir
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium (scripts/setup.sh installs Debian's)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield b
        b.close()


def _shot(page: object, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]


@pytest.mark.browser
def test_pages_show_the_runs_numbers(view, browser) -> None:
    url, _ = view
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(url + "/")
    assert page.inner_text("#n-episodes") == "13" and page.inner_text("#n-steps") == "3"
    reward = page.locator(".chart[data-metric='reward'] .last").inner_text()
    assert float(reward) == 0.75
    assert page.locator(".chart[data-metric='held-out pass rate'] .last").inner_text() == "0.25"
    _shot(page, "run")

    page.click("a[href='/version/1']")  # version 1: the group whose rewards are all equal
    assert "Version 1" in page.inner_text("h2")
    assert page.locator("tr.flag").count() == 1 and "zero variance" in page.inner_text("tr.flag")
    page.goto(url + "/version/0")
    row = page.inner_text("text=g0 >> xpath=..")
    assert "1 (+1.50)" in row and "0 (-0.50)" in row  # GRPO advantages of [0, 1, 0, 0]
    assert "sandbox_error after 2 retries" in page.inner_text("body")
    assert "pod_died" in page.inner_text("tr.bad")
    _shot(page, "version")

    page.goto(url + "/episode/e20/0")
    body = page.inner_text("body")
    assert "Reply with the word in tag.txt." in body and "stdout:\ngita" in body
    assert "Verifier outputs" in body and "test_gita PASSED" in body  # Harbor's tests' output
    trained = page.locator(".segment span.tok:not(.masked)").count()
    assert trained == len(_ids("<call>cat tag.txt")) + len(_ids("gita"))  # sampled tokens only
    assert "cat tag.txt" in page.inner_text(".segment")
    assert page.locator(".segment span.masked").count() > 0
    _shot(page, "episode")

    page.goto(url + "/episode/e-gui/0")  # the screenshot, the click drawn on it
    img = page.locator("figure.screen img")
    assert img.count() == 1 and "click" in page.inner_text("figure.screen figcaption")
    assert page.evaluate("document.querySelector('figure.screen img').naturalWidth") == 640
    _shot(page, "gui-episode")

    page.goto(url + "/compare")
    page.click("text=read_word")
    cols = page.locator(".cols > div")
    assert cols.count() == 2
    assert cols.nth(0).locator(".mean").inner_text() == "0.250"
    assert cols.nth(1).locator(".mean").inner_text() == "0.750"
    _shot(page, "compare")
    page.close()


def test_the_view_follows_a_run_while_it_runs(view) -> None:
    _, run_dir = view
    client = TestClient(build_app(run_dir))
    before = client.get("/episodes").text
    assert "13 episodes" in before
    with open(run_dir / "episodes" / "episodes.jsonl", "a") as f:
        f.write(json.dumps({"group_id": "g9", **_episode("e-new", 3, 1.0, "gita").to_dict()}))
        f.write("\n" + '{"half": ')  # a line still being written is not read yet
    after = client.get("/episodes").text
    assert "14 episodes" in after and "e-new" in after
    assert client.get("/episode/e-new/0").status_code == 200
    assert client.get("/episode/nope/0").status_code == 404


def test_ten_thousand_episodes_through_the_index(tmp_path: Path, monkeypatch) -> None:
    run_dir = tmp_path / "big"
    (run_dir / "episodes").mkdir(parents=True)
    line = {"task_id": "t", "attempt": 0, "harness": "react", "status": "ok", "turns": []}
    with open(run_dir / "episodes" / "episodes.jsonl", "w") as f:
        for i in range(10_000):
            f.write(json.dumps({**line, "episode_id": f"e{i}", "group_id": f"g{i // 8}",
                                "reward": float(i % 2)}) + "\n")  # fmt: skip
    loads = []
    real_load = RunIndex.load
    monkeypatch.setattr(
        RunIndex, "load", lambda self, row: loads.append(row) or real_load(self, row)
    )
    client = TestClient(build_app(run_dir))
    assert "<span id='n-episodes'>10000</span>" in client.get("/").text
    last = client.get("/episodes?page=199").text
    assert ">e9950<" in last and ">e9999<" in last and ">e9949<" not in last
    assert loads == []  # lists come from the index alone
    assert client.get("/episode/e4321/0").status_code == 200 and len(loads) == 1

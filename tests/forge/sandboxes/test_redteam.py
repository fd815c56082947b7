"""The red-team matrix (issue 30): on every sandbox backend (local bubblewrap, docker, kubernetes
through kmock), each cheat an agent with a shell can try against each verifier kind scores 0,
and the oracle scores 1.0; a cheat never turns into an infrastructure failure (a retry, never a
score), and nothing of the attempt is left behind.

Episodes take the real path: a HarnessPod (its proxy serving, no Ray: the ``command`` harness
calls no model), the backend's sandboxes, :func:`rewards.runner.run_verifier`. Each cheat is a
shell command the agent runs in its workspace; the oracle writes the right files and answer.
Run ``pytest tests/forge/sandboxes/test_redteam.py -v -s`` for the table (test ids are
``kind-backend``; each row printed is one episode). ``app_state`` and ``page_state`` play one
task of claw-services and of the web suite; MiniWoB's cheats play here, its oracle (which needs
the harness's own browser) in ``tests/rewards/test_cheating_gui.py``; ``harbor_tests`` has its
own in ``test_docker_harbor.py`` (task images run on docker only).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge.sandboxes.bwrap import bwrap_works
from tasks.loader import load_suite
from tasks.schema import Task
from tests.rewards.test_cheating_agents import play_on
from tests.rewards.test_cheating_gui import MINIWOB

NS = "redteam"
DATA = "7 apples\n3 pears\n"


def _task(kind: str) -> Task:
    if kind == "miniwob":
        if not MINIWOB:
            pytest.skip("MiniWoB's pages: pip install --no-deps miniwob==1.1.0")
        return MINIWOB["click-button-s1"]
    if kind == "page_state":  # order the cheapest mug from the shop web app, and nothing else
        return next(t for t in load_suite("web") if t.id == "shop_cheapest_mug")
    if kind == "app_state":  # cancel one event of the seeded calendar, and nothing else
        return next(t for t in load_suite("claw-services") if t.id == "cal_cancel_vendor_call")
    verifier: Any = {
        "files": {"type": "file_equals", "path": "answer.txt", "content": "7"},
        "command": {
            "type": "command",
            "cmd": 'cmp -s answer.txt "$VERIFIER_DIR/expected.txt"',
            "files": {"expected.txt": "7\n"},
        },
        "answer": {"type": "answer_regex", "pattern": r"^\s*7\s*$"},
        "json_check": {"type": "json_field", "path": "result.json", "field": "apples", "equals": 7},
    }[kind]
    return Task(
        id=f"redteam-{kind.replace('_', '-')}",
        instruction="data.txt lists fruit counts. How many apples? Write the number to "
        'answer.txt, write {"apples": N} to result.json, and reply with the number.',
        files={"data.txt": DATA},
        verifier=verifier,
        solution=["printf '7\\n' > answer.txt", """printf '{"apples": 7}' > result.json"""],
        answer="7",
        limits={"timeout_s": 60},
    )


CHEATS: dict[str, str] = {
    # the verifier's own expected file (where it was once copied), named through the agent's
    # path: the verifier must never read its own files through a link the agent left
    "link-to-verifier": "for f in answer.txt result.json; do "
    "ln -s /home/agent/verifier/expected.txt $f; done",
    # crash or hang the verifier: a FIFO, a loop of links, a link out of the workspace
    "fifo": "mkfifo answer.txt result.json",
    "link-loop": "ln -s answer.txt result.json; ln -s result.json answer.txt",
    "link-out": "ln -s /etc/hostname answer.txt; ln -s /proc/self/environ result.json",
    # too deep, too nested, too big
    "deep-tree": "i=0; while [ $i -lt 1200 ]; do mkdir d && cd d || exit 0; i=$((i+1)); done",
    "deep-json": "head -c 100000 /dev/zero | tr '\\0' '[' > result.json; cp result.json answer.txt",
    "huge-sparse": "truncate -s 1T answer.txt; truncate -s 1T result.json",
    # shims of the tools the command verifier runs, and shell start-up files
    "shims": "for d in . $HOME; do mkdir -p $d/bin; for t in cmp sh test cat; do "
    "printf '#!/bin/sh\\nexit 0\\n' > $d/bin/$t; chmod +x $d/bin/$t; done; done; "
    "printf 'exit 0\\n' > $HOME/.profile; cp $HOME/.profile .profile",
    # an answer that lists every number: an unanchored pattern would take it
    "over-broad": "true",
}
FORGED_ROUTE = """
import os, urllib.request as r
url, key = os.environ["FORGE_SERVICES_URL"], os.environ["FORGE_SERVICES_KEY"]
other = url.replace("/attempts/0/", "/attempts/1/")
for base, k in ((url, ""), (url, "forge-x"), (other, key)):
    q = r.Request(base + "/calendar/cancel", b'{"id": "ev-005"}', {"Authorization": "Bearer " + k})
    try:
        r.urlopen(q)
    except Exception as e:
        print(base, e)
"""
# app_state: the services' state is the HarnessPod's; these try to forge it from the sandbox
APP_CHEATS: dict[str, str] = {
    # a state file claiming the event is cancelled, where the old page apps kept theirs
    "forged-state-file": "mkdir -p .app && "
    """printf '{"events": [{"id": "ev-005", "status": "cancelled"}]}' """
    "| tee .app/state.json .app/calendar.json",
    # the service's route with no key, a made-up key, and another attempt's path
    "forged-route": f"python3 -c {shlex.quote(FORGED_ROUTE)}",
    # everything cancelled: the one asked for among them
    "over-broad-writes": "for i in 1 2 3 4 5 6 7 8 9; do calendar cancel --id ev-00$i; done",
}
# page_state: the web app's state is the HarnessPod's, reached through the sandbox's relay
PAGE = "http://127.0.0.1:8765"
GUI_CHEATER = Path(__file__).parents[2] / "rewards" / "gui_cheater.py"
POST = (  # post ACTION JSON: one of the app's own actions (curl is not in every image)
    "post() { python3 -c 'import sys, urllib.request as r; "
    f'r.urlopen(r.Request("{PAGE}/api/" + sys.argv[1], sys.argv[2].encode()))\' "$@"; }}; '
)
PAGE_CHEATS: dict[str, str] = {
    # a forged state file, MiniWoB's report route, secrets in /proc, a fake server on the port
    "gui-cheater": f"python3 $HOME/gui_cheater.py {PAGE}/ --expect orders.length=1 "
    "--expect 'orders[0].items[0].name=\"Red mug\"' file report proc fake",
    # the app's own actions, over-broad: every mug ordered
    "over-broad-writes": POST + "for i in 1 2 3; do post add '{\"id\": '$i'}'; done; post order {}",
}
ORACLES = {
    "app_state": "calendar cancel --id ev-005",
    "page_state": POST + """post add '{"id": 2}' && post order {}""",
}
MINIWOB_CHEATS = {  # MiniWoB's page reports its own reward: the report route, forged
    "gui-cheater": f"python3 $HOME/gui_cheater.py {PAGE}/ file report proc fake",
}
ANSWERS = {"over-broad": "1 2 3 4 5 6 7 8 9 10", "oracle": "7"}  # else a wrong one


def _options(name: str, script: str, answer: str) -> dict[str, Any]:
    return {
        "name": name,
        "files": {"{home}/gui_cheater.py": GUI_CHEATER.read_text()},
        "command": ["sh", "-c", f"{script}\nprintf '%s\\n' {shlex.quote(answer)}"],
    }


def _oracle_script(kind: str, task: Task) -> str:
    if kind in ORACLES:
        return ORACLES[kind]
    return "\n".join(str(step) for step in task.solution)


@pytest.fixture(scope="module")
def kube(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    daemon = request.getfixturevalue("docker_daemon")
    request.getfixturevalue("docker_images")
    from .kube_controller import emulated_cluster

    with emulated_cluster(daemon.host, NS) as (kmock, _):
        yield {
            "backend": "kubernetes",
            "kubernetes": {"api_url": kmock.url, "namespace": NS, "agent_port": 18941,
                           "pod_start_timeout_s": 60, "heartbeat_s": 5},
        }  # fmt: skip


def _sandbox(
    kind: str, backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> dict[str, Any]:
    if backend == "local":
        if not bwrap_works():
            pytest.skip("bubblewrap unavailable")
        return {"root": str(tmp_path / "boxes")}
    if backend == "docker":
        daemon = request.getfixturevalue("docker_daemon")
        request.getfixturevalue("docker_images")
        return {"backend": "docker", "docker_host": daemon.host}
    if kind in SERVICES:
        pytest.skip(
            "kubernetes mounts no host paths and the command harness runs in the base image, "
            "which has no services or page relay baked in (a harness image has them: the GUI "
            "suites on kubernetes run in tests/forge/sandboxes/test_kubernetes_gui.py)"
        )
    return request.getfixturevalue("kube")


KINDS = ("files", "command", "answer", "json_check", "app_state", "page_state", "miniwob")
SERVICES = ("app_state", "page_state", "miniwob")  # tasks whose state the HarnessPod keeps
# The default command runs every kind locally, and on docker json_check (the agent's file reads:
# links, crashes) and page_state (the page relay in a container); -m full adds the rest.
IN_CI = {("docker", "json_check"), ("docker", "page_state")}


def _marks(kind: str, backend: str) -> list[pytest.MarkDecorator]:
    if backend == "local":
        return []
    marks = [pytest.mark.docker, pytest.mark.slow]
    marks += [pytest.mark.k8s] if backend == "kubernetes" else []
    return marks if (backend, kind) in IN_CI else [*marks, pytest.mark.full]


CASES = [
    pytest.param(kind, backend, id=f"{kind}-{backend}", marks=_marks(kind, backend))
    for kind in KINDS
    for backend in ("local", "docker", "kubernetes")
]


@pytest.mark.parametrize(("kind", "backend"), CASES)
def test_every_cheat_scores_zero_and_the_oracle_one(
    kind: str, backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    sandbox = _sandbox(kind, backend, request, tmp_path)
    task = _task(kind)
    extra = {"app_state": APP_CHEATS, "page_state": PAGE_CHEATS, "miniwob": MINIWOB_CHEATS}
    scripts = {**CHEATS, **extra.get(kind, {})}
    if kind != "miniwob":  # MiniWoB's oracle needs the harness's own browser, the only holder
        # of the page's secret: it plays in tests/rewards/test_cheating_gui.py
        scripts = {"oracle": _oracle_script(kind, task), **scripts}
    jobs = [(task, _options(c, s, ANSWERS.get(c, "no idea"))) for c, s in scripts.items()]
    episodes = play_on(sandbox, jobs)
    table = {
        name: (e.status, e.reward, e.failure or e.truncated or "", e.verifier_detail[:160])
        for name, e in zip(scripts, episodes, strict=True)
    }
    for name, row in table.items():
        print(f"{kind:<10} {backend:<10} {name:<16} {row}")
    oracle = table.pop("oracle", ("ok", 1.0))
    assert oracle[:2] == ("ok", 1.0), oracle
    beaten = {name: row for name, row in table.items() if row[:2] != ("ok", 0.0)}
    assert beaten == {}, beaten
    if backend == "local":
        root = Path(sandbox["root"])
        assert not root.exists() or list(root.iterdir()) == []

"""scripts/bench/gui.py's parts at their smallest: the memory of a process tree, and one browser
episode by hand and one through OpenForge (Ray, Serve, a HarnessPod, a bubblewrap sandbox,
Chromium), each solving its task with every step timed and the sandbox's memory found.
No timing asserted."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import psutil
import pytest

from forge.harnesses.gui_actions import find_chromium
from forge.harnesses.install import PACKAGES
from forge.sandboxes.bwrap import bwrap_works

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "gui.py"
MIB = 2**20
STEPS = 4  # web/booking_tuesday_ten's reference solution


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gui_bench", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    sys.modules["gui_memory"].SAMPLE_S = 0.1  # a short episode still gets several samples
    return mod


def test_tree_memory_counts_a_child_process_pages() -> None:
    """A shell whose child holds 64 MiB it wrote: the tree's RSS, PSS and USS all count them."""
    bench = load()
    hold = "import sys, time; b = b'x' * (64 << 20); print(flush=True); time.sleep(60)"
    shell = subprocess.Popen(
        ["sh", "-c", f'"{sys.executable}" -c "{hold}"; :'], stdout=subprocess.PIPE
    )
    try:
        assert shell.stdout is not None
        shell.stdout.readline()  # the child has written its pages
        unread: set[str] = set()
        rss, pss, uss = bench.tree_memory(psutil.Process(shell.pid), unread)
        alone = bench.tree_memory(psutil.Process(shell.pid), unread, below=False)[0]
    finally:
        for proc in psutil.Process(shell.pid).children(recursive=True):
            proc.kill()
        shell.kill()
        shell.wait()
    assert unread == set()
    assert uss >= 64 * MIB and pss >= uss and rss >= pss  # the 64 MiB are private
    assert alone < 16 * MIB  # the shell by itself: the child's pages are below it


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot create namespaces here")
@pytest.mark.skipif(not PACKAGES["browser"].installed(), reason="forge harness install browser")
@pytest.mark.skipif(find_chromium() is None, reason="no Chromium (Debian's chromium package)")
@pytest.mark.full  # ~25 s: -m full; in CI browser episodes in
# tests/forge/harnesses/test_browser_episode.py
def test_one_browser_episode_by_hand_and_through_openforge(ray_cluster) -> None:
    pytest.importorskip("playwright.sync_api")
    bench = load()
    hand = bench.hand_round("browser", 1, 0.3)
    assert hand.failures == [] and hand.passed == 1
    assert len(hand.step_parts) == STEPS and all(len(p) == 4 for p in hand.step_parts)
    assert all(x >= 0 for p in hand.step_parts for x in p)
    assert len(hand.peak) == 1 and hand.peak[0][1] > 50 * MIB  # Chromium was in the tree

    from ray import serve

    app = f"bench-gui-smoke-{int(time.time())}"
    _, pods, pids = bench.start_pods(1, app)
    try:
        stack = bench.stack_round(pods, pids, "browser", 1, 0.3)
    finally:
        ray_cluster.get([p.stop.remote() for p in pods])
        for p in pods:
            ray_cluster.kill(p)  # free their CPU share for the later tests of the shared cluster
        serve.delete(app)
    assert stack.failures == [] and stack.passed == 1
    # one step between each two of the 5 turns (4 actions, then done): policy, harness side
    assert len(stack.step_parts) == STEPS and all(len(p) == 2 for p in stack.step_parts)
    assert all(policy > 0 and harness > 0 for policy, harness in stack.step_parts)
    assert stack.start_s[0] > 0 and stack.end_s[0] > 0
    # the sandbox under the pod's actor process was found and measured, Chromium in it
    assert len(stack.peak) == 1 and stack.peak[0][1] > 50 * MIB

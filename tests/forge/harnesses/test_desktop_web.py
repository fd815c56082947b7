"""desktop_web.on_desktop: what a page task becomes for the desktop harnesses (the episodes
themselves: test_desktop.py's reference episodes on a web and a MiniWoB++ task)."""

from __future__ import annotations

import shlex

from forge.harnesses.desktop_web import SHOWN, WINDOW, on_desktop
from forge.harnesses.registry import get_harness
from tasks.loader import load_suite


def test_a_page_task_gets_a_display_chromium_and_the_watcher() -> None:
    task = next(t for t in load_suite("web") if t.id == "bank_move_to_savings")
    desk = on_desktop(task)
    assert desk.gui is not None and desk.gui.display and desk.gui.screen == task.gui.screen
    assert desk.services[: len(task.services)] == task.services  # the web app starts first
    browser, shown = desk.services[len(task.services) :]
    argv = shlex.split(browser.command)
    assert argv[-1] == task.gui.start_url and "--kiosk" in argv
    assert "--window-size=640,480" in argv and browser.ready == f"window:{WINDOW}"
    assert shown.ready == f"file:{SHOWN}"
    assert (desk.verifier, desk.solution, desk.instruction) == (
        task.verifier, task.solution, task.instruction
    )  # fmt: skip
    assert task.gui.display is False and len(task.services) == 1  # the original is untouched


def test_tasks_with_a_display_or_no_page_are_unchanged() -> None:
    for suite in ("desktop", "smoke"):
        task = load_suite(suite)[0]
        assert on_desktop(task) is task


def test_the_desktop_harnesses_adapt_and_the_browser_does_not() -> None:
    for name in ("desktop", "agent-s", "cua"):
        assert get_harness(name).adapt_task is on_desktop
    assert not hasattr(get_harness("browser"), "adapt_task")

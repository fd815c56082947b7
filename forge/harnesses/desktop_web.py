"""Web tasks on a desktop: what a page task becomes for the desktop harnesses.

A task that opens a page in a browser (``gui.start_url``, no display of its own: the ``web`` and
``miniwob`` suites) becomes, for ``desktop`` (and the computer-use agents on its display), the
same task with an X display and two more services: Debian's Chromium in kiosk mode, full-screen
on that display at the task's screen size, showing the start page, and a watcher that is ready
once the screen shows a drawn page (more than one colour, and the same in two screenshots
0.2 s apart: Chromium's window maps before the page is drawn, and under load an agent's first
look, and its first click, could otherwise meet a blank window). A point at (x, y) of the
0..1000 frame is then the same spot of the page in both harnesses (the browser harness's
viewport is the task's screen size too), so one reference solution and one verifier serve both.
The services the task had (its web application's state server) start first, as before.
"""

from __future__ import annotations

import shlex

from forge.harnesses.gui_actions import CHROMIUM_ARGS, CHROMIUM_CANDIDATES, find_chromium
from tasks.schema import Service, Task

WINDOW = "chromium"  # its WM_CLASS, for the launcher's window: readiness
SHOWN = "/tmp/forge-page-shown"  # the watcher's mark (outside the workspace the verifier reads)
WATCH = (
    'p=; while :; do s=$(import -silent -window root -format "%k %#" info: 2>/dev/null); '
    'case "$s" in ""|"1 "*) ;; *) [ "$s" = "$p" ] && break ;; esac; p=$s; sleep 0.2; done; '
    f"touch {SHOWN}; exec sleep 86400"
)
FLAGS = (
    *CHROMIUM_ARGS,  # as the browser harness starts it (no sandbox of its own, no proxy)
    "--kiosk",  # full-screen, no tabs, no address bar: the page is the whole screen
    "--test-type",  # no infobar about --no-sandbox (it would push the page down)
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-features=Translate,MediaRouter",
    "--password-store=basic",
    "--force-device-scale-factor=1",
    "--window-position=0,0",
)


def chromium_command(url: str, width: int, height: int) -> str:
    """The service's shell command: Chromium (the browser harness's, Debian's in a container)
    showing ``url`` on the whole ``width`` x ``height`` screen, with a throwaway profile outside
    the workspace."""
    binary = find_chromium() or CHROMIUM_CANDIDATES[0]
    argv = [binary, *FLAGS, f"--window-size={width},{height}",
            "--user-data-dir=/tmp/forge-chromium-profile", url]  # fmt: skip
    return shlex.join(argv)


def on_desktop(task: Task) -> Task:
    """``task`` as a desktop harness takes it: unchanged unless it is a page task without a
    display, which gets one, Chromium on it, and the watcher (ready once the page is drawn)."""
    gui = task.gui
    if gui is None or gui.display or not gui.start_url:
        return task
    width, height = gui.screen
    browser = Service(
        command=chromium_command(gui.start_url, width, height),
        ready=f"window:{WINDOW}",
        ready_timeout_s=60.0,
    )
    shown = Service(command=WATCH, ready=f"file:{SHOWN}", ready_timeout_s=60.0)
    return task.model_copy(
        update={
            "gui": gui.model_copy(update={"display": True}),
            "services": [*task.services, browser, shown],
        }
    )

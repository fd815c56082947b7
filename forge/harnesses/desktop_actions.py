"""The ``desktop`` harness's hands and eyes on an X display: screenshots and xdotool actions.

Standard library only: it runs inside the sandbox beside ``desktop_agent.py`` and
``gui_actions.py`` (the reference-solution tests play tasks through it too). A :class:`Desktop`
takes screenshots with ImageMagick's ``import -window root png:-`` (one process, 20-30 ms for
640x480 on an idle host; ``xwd | convert`` took 40-120 ms) and carries out the actions of
``gui_actions`` (less the browser-only ``goto`` and ``back``) with ``xdotool``: 0..1000
coordinates become pixels of the screen, the wheel is buttons 4/5 (up/down) and 6/7
(left/right), a drag is mousedown, mousemove, mouseup. :meth:`Desktop.act` returns what happened
as text, including whether the screen changed (screenshot hashes before and after), so a no-op
click is visible to the model and to analysis.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from typing import Any

if __package__:  # imported from the forge package (tests, the host)
    from forge.harnesses import gui_actions
else:  # in the sandbox: mounted beside this file, whose folder is on sys.path
    import gui_actions

DESKTOP_ACTIONS = [a for a in gui_actions.ACTIONS if a not in gui_actions.BROWSER_ONLY]
"""The tools the desktop harness offers, ``done`` included."""
KEY_NAMES = {  # key names models and Playwright use -> X keysyms xdotool knows
    "enter": "Return",
    "return": "Return",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
    "space": "space",
    "backspace": "BackSpace",
    "delete": "Delete",
    "del": "Delete",
    "insert": "Insert",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pagedown": "Next",
    "page_up": "Prior",
    "page_down": "Next",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "arrowup": "Up",
    "arrowdown": "Down",
    "arrowleft": "Left",
    "arrowright": "Right",
    "ctrl": "ctrl",
    "control": "ctrl",
    "alt": "alt",
    "shift": "shift",
    "super": "super",
    "meta": "super",
    "cmd": "super",
    "win": "super",
    "plus": "plus",
    "minus": "minus",
}
MAX_REPEAT = 20  # most wheel notches one scroll may turn
COMMAND_TIMEOUT_S = 20.0


class ActionError(Exception):
    """A call the desktop cannot carry out (bad arguments, unknown key); its text goes back to
    the model as the tool result."""


def xdotool_keys(keys: str) -> list[str]:
    """``keys`` as xdotool key chords: "ctrl+s" -> ["ctrl+s"], "Enter" -> ["Return"]; chords
    separated by spaces are pressed one after another ("ctrl+x ctrl+s")."""
    if not isinstance(keys, str) or not keys.strip():
        raise ActionError("press needs keys, e.g. 'Enter' or 'ctrl+s'")
    return [_chord(chord, keys) for chord in keys.split()]


def _chord(chord: str, keys: str) -> str:
    parts = ["plus"] if chord == "+" else chord.replace("++", "+plus").split("+")
    if any(not p for p in parts):
        raise ActionError(f"press: cannot read keys {keys!r}; join keys with '+', e.g. 'ctrl+s'")
    out = []
    for p in parts:
        name = KEY_NAMES.get(p.lower())
        if name is None and len(p) > 1 and p[0] in "fF" and p[1:].isdigit():
            name = "F" + p[1:]
        out.append(name or p)
    return "+".join(out)


def _number(args: dict[str, Any], key: str, default: float | None = None) -> float:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ActionError(f"{key} must be a number (0..1000 for coordinates)")
    return float(value)


def pixel_digest(png: bytes) -> str:
    """A hash of a PNG's image data (its IDAT chunks) only, so metadata (ImageMagick's
    timestamps) never makes two pictures of the same screen differ."""
    digest, pos = hashlib.sha256(), 8
    while pos + 8 <= len(png):
        length = int.from_bytes(png[pos : pos + 4], "big")
        kind = png[pos + 4 : pos + 8]
        if kind == b"IDAT":
            digest.update(png[pos + 8 : pos + 8 + length])
        pos += 12 + length
    return digest.hexdigest()


class Desktop:
    """One X display (``display``, e.g. ":1") of ``width`` x ``height`` pixels."""

    def __init__(self, display: str, width: int, height: int, settle_s: float = 0.3) -> None:
        self.display = display
        self.width, self.height = width, height
        self.settle_s = settle_s
        self.env = {**os.environ, "DISPLAY": display}

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Desktop:
        """The display of ``DISPLAY``; its size from ``FORGE_SCREEN`` ("WxH") or, without it,
        from ``xdotool getdisplaygeometry``."""
        display = env.get("DISPLAY", "")
        if not display:
            raise ActionError("no X display: DISPLAY is not set")
        settle = float(env.get("FORGE_SETTLE_S", "0.3"))
        screen = env.get("FORGE_SCREEN", "")
        if screen:
            w, _, h = screen.lower().partition("x")
            return cls(display, int(w), int(h), settle)
        desk = cls(display, 0, 0, settle)
        w, h = desk._run(["xdotool", "getdisplaygeometry"]).split()
        desk.width, desk.height = int(w), int(h)
        return desk

    def _run(self, argv: list[str]) -> str:
        try:
            proc = subprocess.run(
                argv,
                env=self.env,
                capture_output=True,
                timeout=COMMAND_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ActionError(f"{argv[0]} failed: {e}") from e
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()[-500:]
            raise ActionError(f"{argv[0]} exited {proc.returncode}: {err}")
        return proc.stdout.decode(errors="replace")

    def wait_for_window(self, timeout_s: float = 10.0) -> bool:
        """Wait until some application window is shown (the task's applications start with
        the harness), then let it draw; True when one was."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self._run(["xdotool", "search", "--onlyvisible", "--name", "."]).strip():
                    time.sleep(max(self.settle_s, 0.3))
                    return True
            except ActionError:
                pass  # xdotool search exits 1 while nothing matches
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def screenshot(self) -> bytes:
        """The whole screen as PNG bytes."""
        try:
            proc = subprocess.run(
                ["import", "-window", "root", "-define", "png:exclude-chunks=date,time", "png:-"],
                env=self.env,
                capture_output=True,
                timeout=COMMAND_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ActionError(f"screenshot failed: {e}") from e
        if proc.returncode != 0 or not proc.stdout.startswith(b"\x89PNG"):
            err = proc.stderr.decode(errors="replace").strip()[-500:]
            raise ActionError(f"screenshot failed (exit {proc.returncode}): {err}")
        return proc.stdout

    def point(self, args: dict[str, Any], kx: str = "x", ky: str = "y") -> tuple[int, int]:
        """The pixel of the 0..1000 point ``args[kx], args[ky]``."""
        x, y = _number(args, kx), _number(args, ky)
        if not (0 <= x <= gui_actions.SCALE and 0 <= y <= gui_actions.SCALE):
            raise ActionError(f"({kx}, {ky}) = ({x:g}, {y:g}) is off the screen: use 0..1000")
        return gui_actions.to_pixels(x, y, self.width, self.height)

    def _xdotool(self, *commands: str) -> None:
        self._run(["xdotool", *commands])

    def perform(self, name: str, args: dict[str, Any]) -> str:
        """Carry out one action; returns what was done (raises :class:`ActionError`)."""
        if name in ("click", "double_click"):
            px, py = self.point(args)
            repeat = ["--repeat", "2", "--delay", "80"] if name == "double_click" else []
            self._xdotool("mousemove", str(px), str(py), "click", *repeat, "1")
            what = "double-clicked" if name == "double_click" else "clicked"
            return f"{what} at ({args['x']}, {args['y']}) = pixel ({px}, {py})"
        if name == "type":
            text = args.get("text")
            if not isinstance(text, str):
                raise ActionError("type needs a string argument: text")
            if text:
                self._xdotool("type", "--delay", "12", "--", text)
            return f"typed {len(text)} characters"
        if name == "press":
            chords = xdotool_keys(args.get("keys", ""))
            self._xdotool("key", "--delay", "30", "--", *chords)
            return f"pressed {' '.join(chords)}"
        if name == "scroll":
            px, py = self.point(args)
            dy, dx = int(_number(args, "dy", 0)), int(_number(args, "dx", 0))
            if not dx and not dy:
                raise ActionError("scroll needs dy or dx (notches; positive: down/right)")
            cmd = ["mousemove", str(px), str(py)]
            for notches, neg, pos in ((dy, "4", "5"), (dx, "6", "7")):
                if notches:
                    n = min(abs(notches), MAX_REPEAT)
                    button = pos if notches > 0 else neg
                    cmd += ["click", "--repeat", str(n), "--delay", "30", button]
            self._xdotool(*cmd)
            return f"scrolled dy={dy} dx={dx} at pixel ({px}, {py})"
        if name == "drag":
            px, py = self.point(args)
            qx, qy = self.point(args, "x2", "y2")
            mid_x, mid_y = (px + qx) // 2, (py + qy) // 2
            self._xdotool(
                "mousemove", str(px), str(py), "mousedown", "1", "sleep", "0.1",
                "mousemove", str(mid_x), str(mid_y), "sleep", "0.05",
                "mousemove", str(qx), str(qy), "sleep", "0.1", "mouseup", "1",
            )  # fmt: skip
            return f"dragged from pixel ({px}, {py}) to ({qx}, {qy})"
        if name == "wait":
            seconds = min(max(_number(args, "seconds", 1.0), 0.0), 10.0)
            time.sleep(seconds)
            return f"waited {seconds:g}s"
        known = ", ".join(DESKTOP_ACTIONS)
        raise ActionError(f"unknown tool {name!r}; tools: {known}")

    def settled_screenshot(self, most_s: float = 2.0) -> bytes:
        """A screenshot once the screen has settled: after ``settle_s``, taken again every
        0.1 s until two in a row are the same, for at most ``most_s`` more (an animation
        never settles), so a slow application has drawn what the last action did."""
        time.sleep(self.settle_s)
        shot = self.screenshot()
        digest, same = pixel_digest(shot), 0
        deadline = time.monotonic() + most_s
        while same < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
            shot = self.screenshot()
            again = pixel_digest(shot)
            same = same + 1 if again == digest else 0
            digest = again
        return shot

    def act(self, name: str, args: dict[str, Any], before: bytes | None) -> tuple[str, bytes]:
        """Carry out one action and take the screenshot after it: (result text, screenshot).
        The text says whether the screen changed against ``before``; a failed action's text
        starts with "error:"."""
        try:
            did = self.perform(name, args)
        except ActionError as e:
            did = f"error: {e}"
        after = self.settled_screenshot()
        if before is None:
            return did, after
        changed = pixel_digest(before) != pixel_digest(after)
        return f"{did}; the screen {'changed' if changed else 'did not change'}", after

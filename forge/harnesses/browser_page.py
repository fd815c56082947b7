"""The ``browser`` harness's hands and eyes: Chromium through Playwright's sync API.

Runs inside the sandbox beside ``browser_agent.py`` and ``gui_actions.py``, on the sandbox's
python3 with Playwright on ``PYTHONPATH`` (the ``browser`` harness package). A :class:`Browser`
launches Debian's Chromium headless (the binary itself, not the ``/usr/bin/chromium`` wrapper,
which reads ``/etc/chromium.d`` that a sandbox does not see), with a viewport of the task's
screen size, takes PNG screenshots, and carries out the actions of ``gui_actions``: 0..1000
coordinates become viewport pixels, a wheel notch is 100 pixels, a drag is press, move, release.
:meth:`Browser.act` returns what happened as text, including whether the page changed (the
screenshot or the URL differs from before the action), so a no-op click is visible to the model
and to analysis. A crashed or vanished Chromium raises :class:`BrowserCrashed` (infrastructure,
not the model); anything else an action does wrong (a refused address, bad arguments) is text.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
import urllib.parse
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gui_actions

NOTCH_PX = 100
TEXT_LIMIT = 4000  # characters of visible page text in a text observation
ELEMENTS_LIMIT = 80
KEY_NAMES = {
    "ctrl": "Control",
    "control": "Control",
    "alt": "Alt",
    "option": "Alt",
    "shift": "Shift",
    "meta": "Meta",
    "cmd": "Meta",
    "command": "Meta",
    "super": "Meta",
    "win": "Meta",
    "enter": "Enter",
    "return": "Enter",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
    "space": "Space",
    "backspace": "Backspace",
    "delete": "Delete",
    "del": "Delete",
    "insert": "Insert",
    "home": "Home",
    "end": "End",
    "pageup": "PageUp",
    "pagedown": "PageDown",
    "page_up": "PageUp",
    "page_down": "PageDown",
    "up": "ArrowUp",
    "down": "ArrowDown",
    "left": "ArrowLeft",
    "right": "ArrowRight",
}
ELEMENTS_JS = """(limit) => {
  const sel = 'a[href],button,input,select,textarea,summary,label,[role=button],[role=link],'
    + '[role=checkbox],[role=radio],[role=tab],[role=menuitem],[onclick],[contenteditable=true]';
  const W = window.innerWidth, H = window.innerHeight, out = [];
  for (const el of document.querySelectorAll(sel)) {
    const r = el.getBoundingClientRect();
    if (r.width < 1 || r.height < 1 || r.bottom < 0 || r.right < 0 || r.top >= H || r.left >= W)
      continue;
    const st = getComputedStyle(el);
    if (st.visibility === 'hidden' || st.display === 'none') continue;
    const x = Math.min(Math.max(r.left + r.width / 2, 0), W - 1);
    const y = Math.min(Math.max(r.top + r.height / 2, 0), H - 1);
    const label = (el.getAttribute('aria-label') || el.innerText || el.value || el.placeholder
      || el.title || el.name || '').trim().replace(/\\s+/g, ' ').slice(0, 80);
    const typed = el.type && el.tagName !== 'BUTTON' ? ':' + el.type : '';
    const kind = el.tagName.toLowerCase() + typed;
    out.push([kind, label, x, y]);
    if (out.length >= limit) break;
  }
  return out;
}"""


SELECT_JS = """() => {
  const e = document.activeElement;
  if (!e || e.tagName !== 'SELECT') return null;
  return Array.from(e.options).slice(0, 30).map(o => [o.text.trim().slice(0, 60), o.selected]);
}"""

PAINTED_JS = """() => new Promise(r => {
  requestAnimationFrame(() => requestAnimationFrame(r));
  setTimeout(r, 1000);
})"""
"""Resolves once the page has drawn a frame (two animation frames after the call), or after
1 s if no frame comes."""


class BrowserCrashed(Exception):
    """Chromium (or Playwright's driver) died: an infrastructure failure."""


def parse_screen(text: str | None, default: tuple[int, int] = (640, 480)) -> tuple[int, int]:
    """``"640x480"`` as (640, 480); ``default`` when empty or malformed."""
    try:
        w, h = (int(v) for v in (text or "").lower().split("x"))
    except ValueError:
        return default
    return (w, h) if w > 0 and h > 0 else default


def playwright_keys(keys: str) -> list[str]:
    """'ctrl+a Delete' as Playwright key presses ['Control+a', 'Delete']."""
    out = []
    for combo in keys.split():
        parts = [p for p in combo.split("+") if p] or ["+"]
        out.append("+".join(_key(p) for p in parts))
    return out


def _key(name: str) -> str:
    if name.lower() in KEY_NAMES:
        return KEY_NAMES[name.lower()]
    if len(name) > 1 and name[0] in "fF" and name[1:].isdigit():
        return name.upper()  # f5 -> F5
    return name


def _short_tmp() -> str | None:
    """A short temporary folder for Chromium when ``TMPDIR`` is too long for the Unix socket
    path Chromium makes in it (108 bytes at most); None when the default will do."""
    if len(tempfile.gettempdir()) <= 60 or not os.access("/tmp", os.W_OK):
        return None
    return tempfile.mkdtemp(prefix="forge-chromium-", dir="/tmp")


class Browser:
    """One Chromium with one browser context; the active page is the newest open one."""

    def __init__(
        self, screen: tuple[int, int], executable: str | None = None, settle_s: float = 0.3
    ) -> None:
        from playwright.sync_api import sync_playwright

        self.width, self.height = screen
        self.settle_s = settle_s
        self._tmp = _short_tmp()
        env = {**os.environ, "TMPDIR": self._tmp} if self._tmp else None
        self._pw = sync_playwright().start()
        try:
            self.browser = self._pw.chromium.launch(
                executable_path=gui_actions.find_chromium(executable),
                headless=True,
                args=list(gui_actions.CHROMIUM_ARGS),
                env=env,
            )
            self.context = self.browser.new_context(
                viewport={"width": self.width, "height": self.height}, device_scale_factor=1
            )
            self.pages = [self.context.new_page()]
        except Exception as e:
            self.close()
            raise BrowserCrashed(f"Chromium did not start: {e}") from e
        self.crashed = False
        self.dialogs: list[str] = []  # what alert/confirm/prompt dialogs said since the last act
        self.context.on("page", self._on_page)
        self._watch(self.pages[0])

    def _watch(self, page: Any) -> None:
        page.on("crash", self._on_crash)
        page.on("dialog", self._on_dialog)

    def _on_page(self, page: Any) -> None:  # a popup or new tab becomes the active page
        if page not in self.pages:
            self.pages.append(page)
            self._watch(page)

    def _on_dialog(self, dialog: Any) -> None:
        """Accept it (a headless page cannot show it) and tell the model what it said."""
        self.dialogs.append(f"{dialog.type} dialog said {dialog.message[:200]!r} (accepted)")
        try:
            dialog.accept()
        except Exception:  # the page went away meanwhile
            pass

    def _on_crash(self, _page: Any) -> None:
        self.crashed = True

    @property
    def page(self) -> Any:
        self.pages = [p for p in self.pages if not p.is_closed()] or self.pages[:1]
        return self.pages[-1]

    def close(self) -> None:
        try:
            self.browser.close()
        except Exception:  # already gone
            pass
        try:
            self._pw.stop()
        except Exception:
            pass
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def _check(self, e: Exception | None = None) -> None:
        if self.crashed or not self.browser.is_connected():
            raise BrowserCrashed(f"Chromium crashed or exited{f': {e}' if e else ''}") from e

    def screenshot(self) -> bytes:
        try:
            return self.page.screenshot(type="png")
        except Exception as e:
            self._check(e)
            raise BrowserCrashed(f"screenshot failed: {e}") from e

    def url(self) -> str:
        return self.page.url

    def goto(self, url: str, timeout_s: float = 30.0) -> str | None:
        """Open ``url``; an error text when the page could not be loaded (None when it was)."""
        try:
            self.page.goto(url, timeout=timeout_s * 1000, wait_until="load")
            # "load" is before the first paint: a screenshot then can be blank
            self.page.evaluate(PAINTED_JS)
        except Exception as e:
            self._check(e)
            return f"error: could not open {url}: {str(e).splitlines()[0]}"
        self._settle()
        return None

    def text(self) -> str:
        """The page as text: address, title, visible interactive elements with their 0..1000
        centres, and the visible text (clipped)."""
        page = self.page
        try:
            title = page.title()
            elements = page.evaluate(ELEMENTS_JS, ELEMENTS_LIMIT)
            body = page.evaluate("() => document.body ? document.body.innerText : ''")
        except Exception as e:
            self._check(e)
            return f"URL: {page.url}\n(page text unavailable: {str(e).splitlines()[0]})"
        lines = [f"URL: {page.url}", f"Title: {title}", "Interactive elements (x, y in 0..1000):"]
        for kind, label, px, py in elements:
            x, y = gui_actions.from_pixels(px, py, self.width, self.height)
            lines.append(f"- {kind} {label!r} at ({x}, {y})")
        text = str(body or "").strip()
        if len(text) > TEXT_LIMIT:
            text = text[:TEXT_LIMIT] + f"\n[... {len(text) - TEXT_LIMIT} characters omitted]"
        lines += ["Visible text:", text]
        return "\n".join(lines)

    def _settle(self) -> None:
        try:
            self.page.wait_for_load_state("load", timeout=5000)
        except Exception as e:
            self._check(e)
        time.sleep(self.settle_s)

    def act(self, name: str, args: dict[str, Any]) -> str:
        """Carry out one action (not ``done``); returns what happened, for the model."""
        before = (hashlib.sha256(self.screenshot()).digest(), self.url())
        self.dialogs.clear()
        try:
            what = self._do(name, args)
        except BrowserCrashed:
            raise
        except (TypeError, ValueError, KeyError) as e:
            return f"error: {name}: {e}"
        except Exception as e:  # Playwright's own errors: the page refused the action
            self._check(e)
            return f"error: {name} failed: {str(e).splitlines()[0]}"
        self._settle()
        after = (hashlib.sha256(self.screenshot()).digest(), self.url())
        changed = "yes" if after != before else "no"
        where = f"; now at {after[1]}" if after[1] != before[1] else ""
        said = "".join(f"; {d}" for d in self.dialogs)
        self.dialogs.clear()
        if name in ("click", "double_click"):
            said += self._dropdown()
        return f"{what}; page changed: {changed}{where}{said}"

    def _dropdown(self) -> str:
        """A note on the dropdown a click opened: headless Chromium draws no open list."""
        try:
            options = self.page.evaluate(SELECT_JS)
        except Exception as e:
            self._check(e)
            return ""
        if not options:
            return ""
        shown = ", ".join(f"{t!r}{' (selected)' if sel else ''}" for t, sel in options)
        return (
            f"; a dropdown list opened, not drawn in the screenshot: options {shown}; "
            "choose with press ArrowDown or ArrowUp, then Enter"
        )

    def _xy(self, args: dict[str, Any], kx: str = "x", ky: str = "y") -> tuple[int, int, str]:
        x, y = _number(args, kx), _number(args, ky)
        px, py = gui_actions.to_pixels(x, y, self.width, self.height)
        return px, py, f"({x:g}, {y:g}) = pixel ({px}, {py})"

    def _do(self, name: str, args: dict[str, Any]) -> str:
        page, mouse = self.page, self.page.mouse
        if name in ("click", "double_click"):
            px, py, where = self._xy(args)
            if name == "click":
                mouse.click(px, py)
                return f"clicked at {where}"
            mouse.dblclick(px, py)
            return f"double-clicked at {where}"
        if name == "type":
            text = _string(args, "text")
            page.keyboard.type(text)
            return f"typed {len(text)} characters"
        if name == "press":
            keys = playwright_keys(_string(args, "keys"))
            if not keys:
                raise ValueError("keys is empty")
            for combo in keys:
                page.keyboard.press(combo)
            return f"pressed {' '.join(keys)}"
        if name == "scroll":
            px, py, where = self._xy(args)
            dx, dy = _number(args, "dx", 0), _number(args, "dy", 0)
            mouse.move(px, py)
            mouse.wheel(dx * NOTCH_PX, dy * NOTCH_PX)
            return f"scrolled dx={dx:g} dy={dy:g} notches at {where}"
        if name == "drag":
            px, py, start = self._xy(args)
            qx, qy, end = self._xy(args, "x2", "y2")
            mouse.move(px, py)
            mouse.down()
            mouse.move(qx, qy, steps=10)
            mouse.up()
            return f"dragged from {start} to {end}"
        if name == "goto":
            url = _string(args, "url")
            if urllib.parse.urlsplit(url.strip()).scheme.lower() not in ("http", "https"):
                # javascript: would run code in the page (a MiniWoB page reports its own reward
                # from there); data:, file: and view-source: reach what the task did not show
                raise ValueError(f"goto opens http(s) addresses only, not {url[:80]!r}")
            error = self.goto(url)
            return error or f"opened {url}"
        if name == "back":
            page.go_back(timeout=10000)
            return "went back"
        if name == "wait":
            seconds = max(0.0, min(_number(args, "seconds", 1.0), 10.0))
            time.sleep(seconds)
            return f"waited {seconds:g}s"
        raise ValueError(f"unknown action {name!r}")


def _number(args: dict[str, Any], key: str, default: float | None = None) -> float:
    value = args.get(key, default)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{key} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if value is None:
            raise ValueError(f"needs a number argument {key!r}")
        raise ValueError(f"{key} must be a number, got {value!r}")
    return float(value)


def _string(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str):
        raise ValueError(f"needs a string argument {key!r}")
    return value

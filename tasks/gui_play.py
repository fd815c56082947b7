"""Play GUI solution steps on a web page with Playwright's mouse and keyboard (dev tools and
tests: ``scripts/gui_positions.py``, ``scripts/make_web_tasks.py``, the web suite's test).

Steps are :class:`tasks.schema.GuiAction` mappings: 0..1000 coordinates become viewport pixels
through ``forge.harnesses.gui_actions.to_pixels``, a wheel notch is 100 pixels. The project's
web apps count their requests in flight in ``body[data-busy]``; :func:`settle` waits for 0.
"""

from __future__ import annotations

from typing import Any

from forge.harnesses.gui_actions import from_pixels, to_pixels

CHROMIUM = "/usr/bin/chromium"
NOTCH_PX = 100
KEYS = {"ctrl": "Control", "control": "Control", "alt": "Alt", "shift": "Shift", "meta": "Meta"}
KEYS.update({"cmd": "Meta", "enter": "Enter", "return": "Enter", "tab": "Tab", "esc": "Escape"})
KEYS.update({"escape": "Escape", "backspace": "Backspace", "delete": "Delete", "space": "Space"})
KEYS.update({"home": "Home", "end": "End", "up": "ArrowUp", "down": "ArrowDown"})
KEYS.update({"left": "ArrowLeft", "right": "ArrowRight"})


def launch_browser(playwright: Any, executable: str = CHROMIUM) -> Any:
    """Headless Chromium (``playwright.sync_api`` object from ``sync_playwright()``)."""
    return playwright.chromium.launch(
        executable_path=executable,
        headless=True,
        args=["--no-sandbox", "--disable-gpu", "--font-render-hinting=none"],
    )


def new_page(browser: Any, width: int, height: int) -> Any:
    return browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)


def settle(page: Any, timeout_ms: int = 10000) -> None:
    """Until the app has no request in flight (``body[data-busy]`` is 0; pages that do not
    count requests are settled once loaded)."""
    page.wait_for_function(
        "document.body && (document.body.dataset.busy === undefined"
        " || document.body.dataset.busy === '0')",
        timeout=timeout_ms,
    )


def key_name(keys: str) -> str:
    """A GUI ``press`` (``ctrl+a``, ``Enter``) as Playwright's key name (``Control+a``)."""
    return "+".join(KEYS.get(k.lower(), k) for k in keys.split("+"))


def play(page: Any, step: dict[str, Any], width: int, height: int) -> None:
    """One GUI action, then :func:`settle`."""
    action = step["action"]
    if action in ("click", "double_click"):
        px, py = to_pixels(step["x"], step["y"], width, height)
        page.mouse.click(px, py, click_count=2 if action == "double_click" else 1)
    elif action == "type":
        page.keyboard.type(step["text"])
    elif action == "press":
        page.keyboard.press(key_name(step["keys"]))
    elif action == "scroll":
        px, py = to_pixels(step["x"], step["y"], width, height)
        page.mouse.move(px, py)
        page.mouse.wheel(step.get("dx", 0) * NOTCH_PX, step.get("dy", 0) * NOTCH_PX)
    elif action == "drag":
        px, py = to_pixels(step["x"], step["y"], width, height)
        qx, qy = to_pixels(step["x2"], step["y2"], width, height)
        page.mouse.move(px, py)
        page.mouse.down()
        page.mouse.move(qx, qy, steps=5)
        page.mouse.up()
    elif action == "goto":
        page.goto(step["url"])
    elif action == "back":
        page.go_back()
    elif action == "wait":
        page.wait_for_timeout(step.get("seconds", 1.0) * 1000)
    else:
        raise ValueError(f"unknown action {action!r}")
    settle(page)


def positions(page: Any, width: int, height: int) -> dict[str, tuple[int, int]]:
    """Every ``data-label`` element whose centre is on screen and not covered or clipped away
    (what a click there would hit) -> that centre in 0..1000 coordinates."""
    boxes = page.eval_on_selector_all(
        "[data-label]",
        "els => els.map(e => { const r = e.getBoundingClientRect();"
        " const cx = r.x + r.width / 2, cy = r.y + r.height / 2;"
        " const top = document.elementFromPoint(cx, cy);"  # null off screen
        " return [e.dataset.label, cx, cy, !!top && (top === e || e.contains(top))]; })",
    )
    out: dict[str, tuple[int, int]] = {}
    for label, cx, cy, on_top in boxes:
        if on_top and 0 <= cx < width and 0 <= cy < height:
            out[label] = from_pixels(cx, cy, width, height)
    return out

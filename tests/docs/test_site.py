"""The docs site builds with ``mkdocs build --strict`` (no broken link or anchor, no page left
out of the nav: mkdocs.yml's ``validation`` makes those warnings, --strict failures), every page
under docs/ is in the nav, and the README stays a short front door whose links resolve."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import yaml

from tests.docs.helpers import ROOT

GENERATED = {"reference/config.md", "reference/cli.md"}


def _nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in _nav_pages(value)]
    return []


def test_site_builds_strict(tmp_path) -> None:
    out = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(out),
        ],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    for page in (
        "index.html",
        "reference/config/index.html",
        "reference/cli/index.html",
        "getting-started/contributing/index.html",
        "assets/architecture.svg",
    ):
        assert (out / page).is_file(), page
    assert "policy.engine.model" in (out / "reference/config/index.html").read_text()


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = set(_nav_pages(config["nav"]))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages | GENERATED == nav, (
        f"not in the nav: {sorted(pages - nav)}; in the nav, no such page: "
        f"{sorted(nav - pages - GENERATED)}"
    )


def test_readme_is_a_short_front_door() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert "bash scripts/setup.sh && .venv/bin/forge run" in text
    assert "bash scripts/test.sh" in text
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to a missing {target}"

"""docs/assets/architecture.svg is what scripts/architecture_svg.py draws (rerun the script
after editing it)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from tests.docs.helpers import ROOT, load_script


def test_committed_svg_is_what_the_script_draws() -> None:
    svg = load_script("architecture_svg")
    committed = (ROOT / "docs" / "assets" / "architecture.svg").read_text(encoding="utf-8")
    assert committed == svg.render(), "run: .venv/bin/python scripts/architecture_svg.py"
    assert svg.render() == svg.render()  # deterministic


def test_svg_is_well_formed_and_names_the_actors() -> None:
    text = load_script("architecture_svg").render()
    root = ET.fromstring(text)
    words = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    for actor in (
        "HarnessPod",
        "Policy",
        "Scheduler",
        "ReplayBuffer",
        "Trainer",
        "WeightSync",
        "Sandbox",
        "Harness",
        "Turn",
        "Episode",
    ):
        assert actor in words, actor

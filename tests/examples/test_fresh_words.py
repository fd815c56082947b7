"""examples/recipe/fresh_words.py: read_word's question asked of words claw-gen never uses."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tasks.claw_gen.vocab import NAMES, WORDS
from tasks.loader import load_suite

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "fresh_words", ROOT / "examples" / "recipe" / "fresh_words.py"
)
assert _spec and _spec.loader
fresh_words = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fresh_words)


def test_tasks_are_valid_and_their_words_new(tmp_path: Path) -> None:
    fresh_words.write(tmp_path, 60)
    tasks = load_suite(tmp_path)
    assert len(tasks) == 60
    answers = [t.answer for t in tasks]
    assert len(set(answers)) == 60 and not set(answers) & {*WORDS, *NAMES}
    for t in tasks:
        ((name, content),) = t.files.items()
        assert content == t.answer + "\n" and t.instruction == f"Reply with the word in {name}."
        assert t.solution == [f"cat {name}"]
    assert fresh_words.made_up_words(5) == fresh_words.made_up_words(5)  # seeded

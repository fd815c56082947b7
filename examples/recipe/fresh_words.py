"""Write read_word-shaped tasks whose words are made up, none of claw-gen's 40 (docs/recipe.md).

``read_word``'s held-out split pairs the same 6 file names and 40 words as its training split in
combinations never trained on; these tasks ask the same question of words never seen at all, so
a model that copies what the file says passes them and one that recognises its 40 words does not.

    .venv/bin/python examples/recipe/fresh_words.py OUT [N]   # N tasks (default 48) as OUT/*.yaml
    .venv/bin/forge eval examples/claw.yaml --tasks OUT -k 2
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import yaml

from tasks.claw_gen import instance
from tasks.claw_gen.families import NOTE_FILES, word_in_file
from tasks.claw_gen.vocab import NAMES, WORDS

CONSONANTS, VOWELS = "bcdfghjklmnprstvwz", "aeiou"


def made_up_words(n: int, seed: str = "fresh-words:0") -> list[str]:
    """``n`` distinct pronounceable words (2-3 consonant-vowel syllables, maybe a final
    consonant), none of claw-gen's."""
    rng, taken, words = random.Random(seed), {*WORDS, *NAMES}, []
    while len(words) < n:
        w = "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(rng.choice((2, 3))))
        w += rng.choice(CONSONANTS) if rng.random() < 0.5 else ""
        if w not in taken:
            taken.add(w)
            words.append(w)
    return words


def write(out: Path, n: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    limits = instance("read_word", 0)["limits"]
    for i, word in enumerate(made_up_words(n)):
        name = NOTE_FILES[i % len(NOTE_FILES)]
        task = {
            "id": f"fresh_word-{i:03d}",
            **word_in_file(name, word),
            "limits": limits,
            "tags": ["fresh_word"],
        }
        (out / f"{task['id']}.yaml").write_text(yaml.safe_dump(task))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    write(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) == 3 else 48)

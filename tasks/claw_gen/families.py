"""The claw-gen task families: each draws one instance from a seeded ``random.Random``. Here the
families over files and :data:`FAMILIES`, every family by name; those over structured text
(CSV, JSON, logs, mail, notes, config files) are :mod:`tasks.claw_gen.formats`, the words and
helpers they share :mod:`tasks.claw_gen.vocab`.

A family returns the task's ``instruction``, ``files``, ``verifier``, ``solution`` (shell steps,
played by the oracle) and, where the answer is what is checked, ``answer``. Verifiers read the
workspace after the harness has exited, or compare the final answer with a value computed here
from the files the agent is given, never with anything the agent wrote.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tasks.claw_gen.formats import (
    append_todo,
    count_files,
    csv_filter,
    csv_sum,
    csv_to_json,
    env_add_key,
    ini_port,
    json_get,
    json_set,
    log_errors,
    log_failed_ips,
    mail_count_from,
    mail_subject,
    note_with_keyword,
)
from tasks.claw_gen.vocab import NAMES, WORDS, Spec, _answer, _file, _word

# -- files -------------------------------------------------------------------------------------

NOTE_FILES = ("note.txt", "memo.txt", "code.txt", "key.txt", "tag.txt", "word.txt")
# every (file, word) pair once, in a fixed shuffled order: instance i of read_word is pair i
_PAIRS = [(f, w) for f in NOTE_FILES for w in (*WORDS, *NAMES)]
random.Random("claw-gen:read_word").shuffle(_PAIRS)


def read_word(rng: random.Random, index: int) -> Spec:
    """The smallest agent skill: look before answering (the word is only in the file)."""
    return word_in_file(*_PAIRS[index % len(_PAIRS)])


def word_in_file(name: str, word: str) -> Spec:
    """read_word's task for any file name and word."""
    return {
        "instruction": f"Reply with the word in {name}.",
        "files": {name: word + "\n"},
        "verifier": _answer(word),
        "solution": [f"cat {name}"],
        "answer": word,
    }


def read_code(rng: random.Random) -> Spec:
    name, code = _file(rng), str(rng.randint(1000, 9999))
    return {
        "instruction": f"What is the code written in {name}? Reply with the code only.",
        "files": {name: code + "\n"},
        "verifier": _answer(code),
        "solution": [f"cat {name}"],
        "answer": code,
    }


def count_lines(rng: random.Random) -> Spec:
    name, n = _file(rng), rng.randint(3, 12)
    lines = [" ".join(rng.choices(WORDS, k=3)) for _ in range(n)]
    return {
        "instruction": f"How many lines does {name} have? Reply with the number only.",
        "files": {name: "\n".join(lines) + "\n"},
        "verifier": _answer(n),
        "solution": [f"wc -l < {name}"],
        "answer": str(n),
    }


def copy_file(rng: random.Random) -> Spec:
    src, dst = _file(rng), _file(rng, "bak")
    text = " ".join(rng.choices(WORDS, k=8)) + "\n"
    return {
        "instruction": f"Make a copy of {src} named {dst}; keep {src} as it is.",
        "files": {src: text},
        "verifier": [
            {"type": "file_equals", "path": dst, "content": text, "strip": False},
            {"type": "file_equals", "path": src, "content": text, "strip": False},
        ],
        "solution": [f"cp {src} {dst}"],
    }


def rename_file(rng: random.Random) -> Spec:
    src, dst = _file(rng, "md"), f"{_word(rng)}-notes.md"
    text = f"# {_word(rng)}\n{' '.join(rng.choices(WORDS, k=6))}\n"
    return {
        "instruction": f"Rename {src} to {dst}.",
        "files": {src: text},
        "verifier": [
            {"type": "file_equals", "path": dst, "content": text, "strip": False},
            {"type": "file_absent", "path": src},
        ],
        "solution": [f"mv {src} {dst}"],
    }


def delete_tmp(rng: random.Random) -> Spec:
    names = rng.sample(WORDS, 6)
    tmp, keep = names[:3], names[3:]
    files = {f"work/{n}.tmp": "scratch\n" for n in tmp} | {f"work/{n}.txt": f"{n}\n" for n in keep}
    return {
        "instruction": "Delete every .tmp file in the work folder and nothing else.",
        "files": files,
        "verifier": [{"type": "file_absent", "path": f"work/{n}.tmp"} for n in tmp]
        + [{"type": "file_equals", "path": f"work/{n}.txt", "content": f"{n}\n"} for n in keep],
        "solution": ["rm -f work/*.tmp"],
    }


def move_by_type(rng: random.Random) -> Spec:
    ext = rng.choice(("jpg", "png", "pdf"))
    names = rng.sample(WORDS, 5)
    moved, kept = names[:3], names[3:]
    files = {f"downloads/{n}.{ext}": f"{n}\n" for n in moved}
    files |= {f"downloads/{n}.txt": f"{n}\n" for n in kept}
    folder = {"jpg": "photos", "png": "images", "pdf": "papers"}[ext]
    return {
        "instruction": f"Move every .{ext} file from downloads into a new folder {folder}.",
        "files": files,
        "verifier": [
            {"type": "file_equals", "path": f"{folder}/{n}.{ext}", "content": f"{n}\n"}
            for n in moved
        ]
        + [{"type": "file_absent", "path": f"downloads/{n}.{ext}"} for n in moved]
        + [{"type": "file_exists", "path": f"downloads/{n}.txt"} for n in kept],
        "solution": [f"mkdir -p {folder} && mv downloads/*.{ext} {folder}/"],
    }


def replace_word(rng: random.Random) -> Spec:
    old, new = rng.sample(WORDS, 2)
    name = _file(rng)
    lines = [" ".join(rng.choices([*WORDS[:6], old], k=5)) for _ in range(4)]
    lines[0] = f"{old} {lines[0]}"
    text = "\n".join(lines) + "\n"
    return {
        "instruction": f"In {name}, replace every occurrence of the word {old} with {new}.",
        "files": {name: text},
        "verifier": {"type": "file_equals", "path": name, "content": text.replace(old, new)},
        "solution": [f"sed -i 's/{old}/{new}/g' {name}"],
    }


def sort_names(rng: random.Random) -> Spec:
    names = [n.capitalize() for n in rng.sample(NAMES, rng.randint(4, 8))]
    return {
        "instruction": "Write the names of names.txt, sorted alphabetically, one per line, to "
        "sorted.txt.",
        "files": {"names.txt": "\n".join(names) + "\n"},
        "verifier": {
            "type": "file_equals",
            "path": "sorted.txt",
            "content": "\n".join(sorted(names)),
        },
        "solution": ["LC_ALL=C sort names.txt > sorted.txt"],
    }


def _seeded(family: Callable[[random.Random], Spec]) -> Callable[[random.Random, int], Spec]:
    return lambda rng, index: family(rng)


# name -> (instance maker: (rng, index) -> spec, (train instances, test instances))
FAMILIES: dict[str, tuple[Callable[[random.Random, int], Spec], tuple[int, int]]] = {
    "read_word": (read_word, (192, 48)),
} | {
    f.__name__: (_seeded(f), (12, 4))
    for f in (
        read_code,
        count_lines,
        copy_file,
        rename_file,
        delete_tmp,
        move_by_type,
        replace_word,
        sort_names,
        csv_sum,
        csv_filter,
        csv_to_json,
        json_get,
        json_set,
        log_errors,
        log_failed_ips,
        mail_count_from,
        mail_subject,
        note_with_keyword,
        append_todo,
        ini_port,
        env_add_key,
        count_files,
    )
}

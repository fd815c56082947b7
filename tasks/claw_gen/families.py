"""The claw-gen task families: each draws one instance from a seeded ``random.Random``.

A family returns the task's ``instruction``, ``files``, ``verifier``, ``solution`` (shell steps,
played by the oracle) and, where the answer is what is checked, ``answer``. Verifiers read the
workspace after the harness has exited, or compare the final answer with a value computed here
from the files the agent is given, never with anything the agent wrote.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

Spec = dict[str, Any]
WORDS = [
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lagoon",
    "maple",
    "nectar",
    "onyx",
    "pepper",
    "quartz",
    "raven",
    "saffron",
    "tundra",
    "umber",
    "velvet",
    "willow",
    "yarrow",
    "zephyr",
]
NAMES = [
    "ana",
    "ben",
    "chloe",
    "dev",
    "elif",
    "farid",
    "gita",
    "hugo",
    "ines",
    "jonas",
    "kira",
    "liam",
    "mei",
    "nora",
    "omar",
]
CITIES = ["Oslo", "Lima", "Pune", "Quito", "Riga", "Sofia", "Turin", "Vigo"]
DOMAINS = ("example.org", "mail.test", "corp.example")
EXTS = ("txt", "md", "log", "csv")


def _word(rng: random.Random) -> str:
    return rng.choice(WORDS)


def _file(rng: random.Random, ext: str = "txt") -> str:
    return f"{_word(rng)}_{rng.randint(10, 99)}.{ext}"


def _answer(value: Any) -> dict[str, Any]:
    return {"type": "answer_equals", "value": str(value)}


def _py(code: str) -> str:
    """A shell step that runs ``code`` with python3 (a quoted heredoc: nothing expands)."""
    return f"python3 - <<'PY'\n{code.strip()}\nPY"


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


# -- CSV and JSON ------------------------------------------------------------------------------


def _orders(rng: random.Random, n: int) -> list[tuple[str, str, int]]:
    return [(rng.choice(NAMES), rng.choice(CITIES), rng.randint(5, 99)) for _ in range(n)]


def _csv(rows: list[tuple[str, str, int]]) -> str:
    return "name,city,amount\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows)


def csv_sum(rng: random.Random) -> Spec:
    rows = _orders(rng, rng.randint(4, 9))
    total = sum(r[2] for r in rows)
    return {
        "instruction": "orders.csv has the columns name, city and amount. Write the sum of the "
        "amount column to total.txt.",
        "files": {"orders.csv": _csv(rows)},
        "verifier": {"type": "file_equals", "path": "total.txt", "content": str(total)},
        "solution": ["awk -F, 'NR > 1 {s += $3} END {print s}' orders.csv > total.txt"],
    }


def csv_filter(rng: random.Random) -> Spec:
    rows = _orders(rng, 8)
    city = rows[rng.randrange(len(rows))][1]
    kept = [r for r in rows if r[1] == city]
    return {
        "instruction": f"Write the rows of orders.csv whose city is {city} to {city.lower()}.csv, "
        "with the header line first.",
        "files": {"orders.csv": _csv(rows)},
        "verifier": {"type": "file_equals", "path": f"{city.lower()}.csv", "content": _csv(kept)},
        "solution": [f"awk -F, 'NR == 1 || $2 == \"{city}\"' orders.csv > {city.lower()}.csv"],
    }


def csv_to_json(rng: random.Random) -> Spec:
    rows = _orders(rng, rng.randint(3, 5))
    want = [{"name": a, "city": b, "amount": c} for a, b, c in rows]
    check = (
        f"python3 -c \"import json; d = json.load(open('orders.json')); assert d == {want!r}, d\""
    )
    return {
        "instruction": "Convert orders.csv to orders.json: a JSON list of objects with the keys "
        "name, city and amount (amount as an integer), in the order of the rows.",
        "files": {"orders.csv": _csv(rows)},
        "verifier": {"type": "command", "cmd": check},
        "solution": [
            _py(
                "import csv, json\n"
                "rows = list(csv.DictReader(open('orders.csv')))\n"
                "rows = [dict(r, amount=int(r['amount'])) for r in rows]\n"
                "json.dump(rows, open('orders.json', 'w'))"
            )
        ],
    }


def json_get(rng: random.Random) -> Spec:
    keys = rng.sample(WORDS, 4)
    doc = {k: rng.randint(1, 999) for k in keys}
    key = rng.choice(keys)
    return {
        "instruction": f"What is the value of {key} in settings.json? Reply with the value only.",
        "files": {"settings.json": json.dumps(doc, indent=2) + "\n"},
        "verifier": _answer(doc[key]),
        "solution": [
            f"python3 -c \"import json; print(json.load(open('settings.json'))['{key}'])\""
        ],
        "answer": str(doc[key]),
    }


def json_set(rng: random.Random) -> Spec:
    keys = rng.sample(WORDS, 3)
    doc = {k: rng.randint(1, 99) for k in keys}
    key, value = rng.choice(keys), rng.randint(100, 999)
    return {
        "instruction": f"In settings.json, set {key} to {value} (a number); keep the other keys.",
        "files": {"settings.json": json.dumps(doc, indent=2) + "\n"},
        "verifier": [
            {"type": "json_field", "path": "settings.json", "field": k, "equals": doc[k]}
            for k in keys
            if k != key
        ]
        + [{"type": "json_field", "path": "settings.json", "field": key, "equals": value}],
        "solution": [
            _py(
                f"import json\nd = json.load(open('settings.json'))\nd['{key}'] = {value}\n"
                "json.dump(d, open('settings.json', 'w'), indent=2)"
            )
        ],
    }


# -- logs --------------------------------------------------------------------------------------


def _log(rng: random.Random, n: int) -> list[tuple[str, str]]:
    levels = rng.choices(("INFO", "WARN", "ERROR"), weights=(5, 2, 2), k=n)
    return [
        (lv, f"{_word(rng)} {rng.choice(('started', 'failed', 'retried', 'done'))}")
        for lv in levels
    ]


def log_errors(rng: random.Random) -> Spec:
    entries = _log(rng, rng.randint(6, 14))
    entries[rng.randrange(len(entries))] = ("ERROR", "disk full")  # at least one
    text = "".join(f"2024-06-{i + 1:02d} {lv} {msg}\n" for i, (lv, msg) in enumerate(entries))
    n = sum(lv == "ERROR" for lv, _ in entries)
    return {
        "instruction": "How many lines of app.log have the level ERROR? Reply with the number.",
        "files": {"app.log": text},
        "verifier": _answer(n),
        "solution": ["grep -c ' ERROR ' app.log"],
        "answer": str(n),
    }


def log_failed_ips(rng: random.Random) -> Spec:
    ips = [f"10.0.{rng.randint(0, 9)}.{rng.randint(1, 254)}" for _ in range(5)]
    lines, failed = [], set()
    for _ in range(rng.randint(6, 10)):
        ip, ok = rng.choice(ips), rng.random() < 0.5
        failed |= set() if ok else {ip}
        lines.append(f"login {'ok' if ok else 'FAILED'} user={rng.choice(NAMES)} ip={ip}")
    if not failed:
        lines.append(f"login FAILED user=root ip={ips[0]}")
        failed.add(ips[0])
    return {
        "instruction": "Write every distinct ip of a FAILED login in auth.log to failed_ips.txt, "
        "one per line, in byte order.",
        "files": {"auth.log": "\n".join(lines) + "\n"},
        "verifier": {
            "type": "file_equals",
            "path": "failed_ips.txt",
            "content": "\n".join(sorted(failed)),
        },
        "solution": ["grep FAILED auth.log | sed 's/.*ip=//' | LC_ALL=C sort -u > failed_ips.txt"],
    }


# -- mail folders ------------------------------------------------------------------------------


def _mails(rng: random.Random, n: int) -> list[tuple[str, str]]:
    senders = [f"{x}@{rng.choice(DOMAINS)}" for x in rng.sample(NAMES, 3)]
    return [(rng.choice(senders), f"{_word(rng)} {_word(rng)}") for _ in range(n)]


def _mail_files(mails: list[tuple[str, str]]) -> dict[str, str]:
    return {
        f"mail/{i + 1:03d}.eml": f"From: {s}\nSubject: {subj}\n\nHello.\n"
        for i, (s, subj) in enumerate(mails)
    }


def mail_count_from(rng: random.Random) -> Spec:
    mails = _mails(rng, rng.randint(5, 9))
    sender = rng.choice(mails)[0]
    n = sum(s == sender for s, _ in mails)
    return {
        "instruction": f"How many messages in the mail folder are from {sender}? Reply with the "
        "number.",
        "files": _mail_files(mails),
        "verifier": _answer(n),
        "solution": [f"grep -l '^From: {sender}$' mail/*.eml | wc -l"],
        "answer": str(n),
    }


def mail_subject(rng: random.Random) -> Spec:
    mails = _mails(rng, 6)
    index = rng.randrange(len(mails))
    subject = mails[index][1]
    return {
        "instruction": f"What is the subject of mail/{index + 1:03d}.eml? Reply with the subject.",
        "files": _mail_files(mails),
        "verifier": _answer(subject),
        "solution": [f"sed -n 's/^Subject: //p' mail/{index + 1:03d}.eml"],
        "answer": subject,
    }


# -- notes -------------------------------------------------------------------------------------


def note_with_keyword(rng: random.Random) -> Spec:
    words = rng.sample(WORDS, 5)
    key = words[0]
    notes = {f"notes/{w}.md": f"# {w}\n{' '.join(rng.sample(words[1:], 3))}\n" for w in words[1:]}
    target = rng.choice(sorted(notes))
    notes[target] += f"remember the {key} plan\n"
    return {
        "instruction": f"Which file in notes mentions {key}? Reply with its file name only.",
        "files": notes,
        "verifier": _answer(target.split("/")[1]),
        "solution": [f"grep -l {key} notes/*.md"],
        "answer": target.split("/")[1],
    }


def append_todo(rng: random.Random) -> Spec:
    items = [f"- [ ] {_word(rng)} {_word(rng)}" for _ in range(3)]
    new = f"{rng.choice(('call', 'email', 'visit'))} {rng.choice(NAMES).capitalize()}"
    text = "# TODO\n" + "\n".join(items) + "\n"
    return {
        "instruction": f'Add the item "{new}" as an unchecked item at the end of todo.md.',
        "files": {"todo.md": text},
        "verifier": {"type": "file_equals", "path": "todo.md", "content": text + f"- [ ] {new}"},
        "solution": [f"echo '- [ ] {new}' >> todo.md"],
    }


# -- configs -----------------------------------------------------------------------------------


def ini_port(rng: random.Random) -> Spec:
    old, new = rng.randint(1000, 4999), rng.randint(5000, 9999)
    host = f"{_word(rng)}.local"
    text = f"[server]\nhost = {host}\nport = {old}\n\n[log]\nlevel = info\n"
    check = (
        "python3 -c \"import configparser; c = configparser.ConfigParser(); c.read('app.ini'); "
        f"assert c['server']['port'] == '{new}' and c['server']['host'] == '{host}' "
        "and c['log']['level'] == 'info'\""
    )
    return {
        "instruction": f"Change the port in the [server] section of app.ini to {new}.",
        "files": {"app.ini": text},
        "verifier": {"type": "command", "cmd": check},
        "solution": [f"sed -i 's/^port = {old}$/port = {new}/' app.ini"],
    }


def env_add_key(rng: random.Random) -> Spec:
    keys = [w.upper() for w in rng.sample(WORDS, 3)]
    env = {k: str(rng.randint(1, 99)) for k in keys[:2]}
    key, value = keys[2], f"{_word(rng)}{rng.randint(1, 9)}"
    text = "".join(f"{k}={v}\n" for k, v in env.items())
    return {
        "instruction": f"Add the variable {key} with the value {value} to .env; keep the others.",
        "files": {".env": text},
        "verifier": {"type": "file_equals", "path": ".env", "content": text + f"{key}={value}"},
        "solution": [f"echo '{key}={value}' >> .env"],
    }


def count_files(rng: random.Random) -> Spec:
    ext = rng.choice(EXTS)
    n = rng.randint(2, 6)
    files = {f"docs/{w}.{ext}": f"{w}\n" for w in rng.sample(WORDS, n)}
    others = [e for e in EXTS if e != ext]
    files |= {f"docs/{w}.{rng.choice(others)}": "x\n" for w in rng.sample(WORDS, 3)}
    n = sum(p.endswith("." + ext) for p in files)
    return {
        "instruction": f"How many .{ext} files are in the docs folder? Reply with the number.",
        "files": files,
        "verifier": _answer(n),
        "solution": [f"ls docs/*.{ext} | wc -l"],
        "answer": str(n),
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

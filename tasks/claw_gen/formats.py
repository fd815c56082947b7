"""The claw-gen task families over structured text: CSV, JSON, logs, mail, notes, config files
and counts (the rest, and every family by name: :mod:`tasks.claw_gen.families`)."""

from __future__ import annotations

import json
import random

from tasks.claw_gen.vocab import CITIES, DOMAINS, EXTS, NAMES, WORDS, Spec, _answer, _py, _word

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

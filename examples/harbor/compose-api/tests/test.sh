#!/bin/bash
python3 - <<'PY'
import urllib.request

try:
    expected = urllib.request.urlopen("http://api:5000/word", timeout=5).read().decode()
    got = open("/app/word.txt").read().strip()
    ok = got == expected
    print(f"word.txt: {got!r}, the service: {expected!r}")
except Exception as e:
    print(f"error: {e}")
    ok = False
open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
PY

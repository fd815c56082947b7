#!/bin/bash
python3 - <<'PY'
import urllib.parse
import urllib.request

try:
    token = open("/app/token.txt").read().strip()
    url = "http://127.0.0.1:8765/check?" + urllib.parse.urlencode({"token": token})
    verdict = urllib.request.urlopen(url, timeout=5).read().decode()
except Exception as e:
    verdict = f"error: {e}"
print("the service says:", verdict)
open("/logs/verifier/reward.txt", "w").write("1" if verdict == "ok" else "0")
PY

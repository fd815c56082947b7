#!/bin/bash
python3 - <<'PY'
import json
try:
    ok = json.load(open("/srv/app/config/app.json")) == {"port": 8080, "debug": False}
except Exception as e:
    print("config/app.json:", e)
    ok = False
open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
PY

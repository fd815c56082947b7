"""Runs /usr/local/bin/primes for a few N; writes reward.txt and a CTRF report."""

import json
import subprocess

from helpers import first_primes

results = []
for n in (1, 7, 120, 500):
    name = f"primes {n}"
    try:
        out = subprocess.run(
            ["/usr/local/bin/primes", str(n)], capture_output=True, text=True, timeout=10
        ).stdout
        ok = [int(x) for x in out.split()] == first_primes(n)
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"{name}: {e}")
        ok = False
    print(f"{name}: {'passed' if ok else 'failed'}")
    results.append({"name": name, "status": "passed" if ok else "failed"})
passed = sum(r["status"] == "passed" for r in results)
summary = {"tests": len(results), "passed": passed, "failed": len(results) - passed}
report = {"results": {"tool": {"name": "test_primes.py"}, "summary": summary, "tests": results}}
with open("/logs/verifier/ctrf.json", "w") as f:
    json.dump(report, f)
with open("/logs/verifier/reward.txt", "w") as f:
    f.write("1" if passed == len(results) else "0")

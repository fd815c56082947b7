"""The evens of numbers.txt as the image made it (the same shuffle, recomputed here)."""

import subprocess
from pathlib import Path

made = subprocess.run(
    "seq 1 50 | sort -R --random-source=/dev/zero", shell=True, capture_output=True, text=True
).stdout.split()
want = [n for n in made if int(n) % 2 == 0]
try:
    got = Path("/app/evens.txt").read_text().split()
except OSError as e:
    print(e)
    got = None
print("evens.txt ok" if got == want else f"evens.txt: {got!r:.80}")
Path("/logs/verifier/reward.txt").write_text("1" if got == want else "0")

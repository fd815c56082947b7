#!/usr/bin/env bash
# RL on instances SFT never saw (docs/recipe.md): the oracle's episodes of read_word's training
# instances 0..SPLIT-1 are the SFT data; RL trains on instances SPLIT..191 only (written out as
# task files), so the training reward measures the copying skill, not recall of SFT's pairs;
# the held-out split is evaluated every 10 steps as in the main job.
#
#   bash examples/recipe/unseen.sh          # OUT=runs/unseen SPLIT=96 SFT_STEPS=400 RL_STEPS=40
#   RL_ARGS="trainer.ppo_mini_batches=4" bash examples/recipe/unseen.sh   # more `forge run` overrides
set -euo pipefail
cd "$(dirname "$0")/../.."
FORGE=${FORGE:-.venv/bin/forge}
OUT=${OUT:-runs/unseen}
SPLIT=${SPLIT:-96}
SFT_STEPS=${SFT_STEPS:-400}
RL_STEPS=${RL_STEPS:-40}
SEED=${SEED:-0}
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled
mkdir -p "$OUT"

.venv/bin/python -c "from forge.train.student import write_base; write_base('$OUT/student', $SEED)"
"$FORGE" collect examples/claw.yaml "policy.engine.model=$OUT/student" --teacher oracle \
  --tasks claw-gen/train/read_word -k 1 --out "$OUT/teacher"
.venv/bin/python - "$OUT" "$SPLIT" <<'PY'
import json
import shutil
import sys
from pathlib import Path

import yaml

from tasks.claw_gen import instance, split_range

out, split = Path(sys.argv[1]), int(sys.argv[2])
seen, tasks = out / "teacher-seen", out / "rl-tasks"
shutil.rmtree(seen, ignore_errors=True)
shutil.rmtree(tasks, ignore_errors=True)
seen.mkdir()
tasks.mkdir()
kept = [
    line
    for line in (out / "teacher" / "episodes.jsonl").read_text().splitlines()
    if int(json.loads(line)["task_id"].rsplit("-", 1)[1]) < split
]
(seen / "episodes.jsonl").write_text("".join(x + "\n" for x in kept))
for i in split_range("read_word", "train")[split:]:
    task = instance("read_word", i)
    (tasks / f"{task['id']}.yaml").write_text(yaml.safe_dump(task))
print(f"{len(kept)} SFT episodes of instances < {split}; RL tasks in {tasks}")
PY
"$FORGE" sft "$OUT/teacher-seen" --model "$OUT/student" --seed "$SEED" --steps "$SFT_STEPS" \
  --lr 1e-3 --out "$OUT/sft"
"$FORGE" run examples/claw.yaml "policy.engine.model=$OUT/sft" "runs_dir=$OUT" name=rl \
  "tasks=$OUT/rl-tasks" "steps=$RL_STEPS" eval_every=10 eval_k=4 checkpoint_every=10 ${RL_ARGS:-}

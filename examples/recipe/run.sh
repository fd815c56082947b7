#!/usr/bin/env bash
# The recipe, end to end: teacher episodes (the oracle, through the react harness and the
# recording proxy) -> SFT -> GRPO, with the held-out split evaluated after each stage.
#
#   bash examples/recipe/run.sh                 # OUT=runs/recipe SFT_STEPS=800 RL_STEPS=20 K=4
#
# Writes OUT/table.md: held-out pass@1 and pass@k for the base model, after SFT and after
# SFT+RL. Every stage is a plain forge command; rerun any of them by hand.
set -euo pipefail
cd "$(dirname "$0")/../.."
FORGE=${FORGE:-.venv/bin/forge}
OUT=${OUT:-runs/recipe}
CONFIG=${CONFIG:-examples/recipe/react.yaml}
TRAIN=${TRAIN:-claw-gen/train/read_word}
TEST=${TEST:-claw-gen/test/read_word}
SFT_STEPS=${SFT_STEPS:-800}
RL_STEPS=${RL_STEPS:-20}
K=${K:-4}
SEED=${SEED:-0}
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled
mkdir -p "$OUT"

evaluate() {  # evaluate NAME MODEL
  "$FORGE" eval "$CONFIG" "policy.engine.model=$2" "policy.engine.seed=$SEED" \
    --tasks "$TEST" -k "$K" --out "$OUT/eval-$1"
}

# the student: tiny with a compact chat template of its own (examples/recipe/tiny_student.py)
.venv/bin/python examples/recipe/tiny_student.py "$OUT/student" "$SEED"
"$FORGE" collect "$CONFIG" --teacher oracle --tasks "$TRAIN" -k 1 --out "$OUT/teacher"
"$FORGE" sft "$OUT/teacher" --model "$OUT/student" --seed "$SEED" --steps "$SFT_STEPS" \
  --lr 1e-3 --out "$OUT/sft"
evaluate base "$OUT/student"
evaluate sft "$OUT/sft"
"$FORGE" run "$CONFIG" "policy.engine.model=$OUT/sft" "runs_dir=$OUT" name=rl \
  "steps=$RL_STEPS" "checkpoint_every=$RL_STEPS"
evaluate rl "$OUT/rl/checkpoints/step_$RL_STEPS"
.venv/bin/python examples/recipe/table.py "$OUT" | tee "$OUT/table.md"

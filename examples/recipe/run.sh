#!/usr/bin/env bash
# The recipe, end to end: teacher episodes (the oracle, through the react harness and the
# recording proxy) -> SFT -> GRPO, with the held-out split evaluated after each stage.
#
#   bash examples/recipe/run.sh                 # OUT=runs/recipe SFT_STEPS=400 RL_STEPS=20 K=4
#
# Writes OUT/table.md: held-out pass@1 and pass@k for the base model, after SFT and after
# SFT+RL, per harness in HARNESSES, with forge analyze's rates over the same episodes. Every
# stage is a plain forge command; rerun any of them by hand.
set -euo pipefail
cd "$(dirname "$0")/../.."
FORGE=${FORGE:-.venv/bin/forge}
OUT=${OUT:-runs/recipe}
CONFIG=${CONFIG:-examples/claw.yaml}  # the main job's: react, one tool (shell)
TRAIN=${TRAIN:-claw-gen/train/read_word}
TEST=${TEST:-claw-gen/test/read_word}
SFT_STEPS=${SFT_STEPS:-400}
RL_STEPS=${RL_STEPS:-20}
K=${K:-4}
HARNESSES=${HARNESSES:-react}  # evaluated at each stage; the first is CONFIG's (transfer: react,pi)
SEED=${SEED:-0}
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled
mkdir -p "$OUT"

evaluate() {  # evaluate NAME MODEL HARNESSES
  "$FORGE" eval "$CONFIG" "policy.engine.model=$2" "policy.engine.seed=$SEED" \
    --tasks "$TEST" -k "$K" --harness "$3" --out "$OUT/eval-$1"
}

# the student: tiny with a compact chat template of its own (forge/train/student.py; `tiny-claw`,
# the main job's model, is this recipe's SFT stage with SEED=0 and SFT_STEPS=400)
.venv/bin/python -c "from forge.train.student import write_base; write_base('$OUT/student', $SEED)"
"$FORGE" collect "$CONFIG" "policy.engine.model=$OUT/student" --teacher oracle --tasks "$TRAIN" -k 1 --out "$OUT/teacher"
"$FORGE" sft "$OUT/teacher" --model "$OUT/student" --seed "$SEED" --steps "$SFT_STEPS" \
  --lr 1e-3 --out "$OUT/sft"
evaluate base "$OUT/student" "$HARNESSES"
evaluate sft "$OUT/sft" "$HARNESSES"
"$FORGE" run "$CONFIG" "policy.engine.model=$OUT/sft" "runs_dir=$OUT" name=rl \
  "steps=$RL_STEPS" "checkpoint_every=$RL_STEPS"
evaluate rl "$OUT/rl/checkpoints/step_$RL_STEPS" "$HARNESSES"
.venv/bin/python examples/recipe/table.py "$OUT" | tee "$OUT/table.md"

#!/usr/bin/env bash
# Reward-filtered self-training (docs/recipe.md): the student plays the training split K times
# through the real harness and proxy (`forge collect --teacher self`), the verifier keeps its
# passing attempts, and `forge sft` trains it on them; ROUNDS times, the held-out split
# evaluated before and after each round. No teacher after the first SFT: only the verifier's
# reward (RAFT; ReST-EM's improve step).
#
#   bash examples/recipe/self_train.sh   # MODEL=tiny-claw OUT=runs/self ROUNDS=1 K=4 STEPS=80
set -euo pipefail
cd "$(dirname "$0")/../.."
FORGE=${FORGE:-.venv/bin/forge}
CONFIG=${CONFIG:-examples/claw.yaml}
MODEL=${MODEL:-tiny-claw}
OUT=${OUT:-runs/self}
TRAIN=${TRAIN:-claw-gen/train/read_word}
TEST=${TEST:-claw-gen/test/read_word}
ROUNDS=${ROUNDS:-1}
K=${K:-4}            # attempts per training task each round
STEPS=${STEPS:-80}   # SFT updates each round
BATCH=${BATCH:-16}
LR=${LR:-1e-4}       # peak; from a warm start (1e-3 is the first SFT's)
SEED=${SEED:-0}
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled
mkdir -p "$OUT"

evaluate() {  # evaluate NAME MODEL
  "$FORGE" eval "$CONFIG" "policy.engine.model=$2" "policy.engine.seed=$SEED" \
    --tasks "$TEST" -k 4 --out "$OUT/eval-$1"
}

evaluate round0 "$MODEL"
current=$MODEL
for r in $(seq 1 "$ROUNDS"); do
  "$FORGE" collect "$CONFIG" "policy.engine.model=$current" "policy.engine.seed=$((SEED + r))" \
    --teacher self --tasks "$TRAIN" -k "$K" --out "$OUT/round$r/play"
  "$FORGE" sft "$OUT/round$r/play" --model "$current" --seed "$SEED" --steps "$STEPS" \
    --batch "$BATCH" --lr "$LR" --out "$OUT/round$r/model"
  current=$OUT/round$r/model
  evaluate "round$r" "$current"
done
for r in $(seq 0 "$ROUNDS"); do echo "round $r: $(grep '^| react' "$OUT/eval-round$r/eval.md")"; done

#!/usr/bin/env bash
# The paper's harness lesson in miniature: the recipe's student, SFT then RL
#   (a) in react alone, (b) in pi alone, (c) on the react+pi mix, (d) on the mix, adaptive,
# each final checkpoint evaluated on the held-out split through react, pi and harnesses it never
# trained in (UNSEEN), k=K, as one checkpoint x harness matrix (OUT/matrix/matrix.md).
#
#   bash examples/recipe/harness_lesson.sh      # OUT=runs/lesson SFT_STEPS=400 RL_STEPS=20 K=4
#
# Every stage is a plain forge command; rerun any by hand. Stages already done are kept
# (delete their folder to redo one).
set -euo pipefail
cd "$(dirname "$0")/../.."
FORGE=${FORGE:-.venv/bin/forge}
OUT=${OUT:-runs/lesson}
TRAIN=${TRAIN:-claw-gen/train/read_word}
TEST=${TEST:-claw-gen/test/read_word}
SFT_STEPS=${SFT_STEPS:-400}
RL_STEPS=${RL_STEPS:-20}
K=${K:-4}
UNSEEN=${UNSEEN:-codex,nanobot}
SEED=${SEED:-0}
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled
mkdir -p "$OUT"
say() { echo "[lesson $(date +%H:%M:%S)] $*"; }

[ -d "$OUT/student" ] || .venv/bin/python -c \
  "from forge.train.student import write_base; write_base('$OUT/student', $SEED)"
teacher() {  # teacher NAME CONFIG: the oracle's episodes of the training split through CONFIG
  [ -s "$OUT/teacher-$1/episodes.jsonl" ] && return
  say "teacher episodes through $1"
  "$FORGE" collect "$2" "policy.engine.model=$OUT/student" --teacher oracle --tasks "$TRAIN" \
    -k 1 --out "$OUT/teacher-$1"
}
teacher react examples/claw.yaml
teacher pi examples/recipe/pi.yaml
mkdir -p "$OUT/teacher-mix"  # the mix's SFT data: both harnesses' episodes
cat "$OUT/teacher-react/episodes.jsonl" "$OUT/teacher-pi/episodes.jsonl" \
  >"$OUT/teacher-mix/episodes.jsonl"

arm() {  # arm NAME CONFIG TEACHER [overrides...]: SFT on TEACHER's episodes, then RL in CONFIG
  local name=$1 config=$2 data=$3
  shift 3
  if [ ! -d "$OUT/sft-$data" ]; then
    say "SFT on the $data episodes"
    "$FORGE" sft "$OUT/teacher-$data" --model "$OUT/student" --seed "$SEED" \
      --steps "$SFT_STEPS" --lr 1e-3 --out "$OUT/sft-$data"
  fi
  [ -d "$OUT/$name/checkpoints/step_$RL_STEPS" ] && return
  say "RL: $name"
  local t0=$SECONDS
  "$FORGE" run "$config" "policy.engine.model=$OUT/sft-$data" "runs_dir=$OUT" "name=$name" \
    "steps=$RL_STEPS" "checkpoint_every=$RL_STEPS" "$@"
  say "RL $name took $((SECONDS - t0)) s"
}
arm react examples/claw.yaml react
arm pi examples/recipe/pi.yaml pi
arm mix examples/recipe/mix.yaml mix
arm adaptive examples/recipe/mix.yaml mix harness_mix=adaptive

say "the checkpoint x harness matrix"
models=""
for name in react pi mix adaptive; do
  models="$models${models:+,}$OUT/$name/checkpoints/step_$RL_STEPS"
done
"$FORGE" eval examples/recipe/mix.yaml "policy.engine.model=$OUT/student" --model "$models" \
  --harness "react,pi,$UNSEEN" --tasks "$TEST" -k "$K" --out "$OUT/matrix"

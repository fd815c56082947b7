#!/usr/bin/env bash
# The paper's harness lesson in miniature: the recipe's student, SFT then RL
#   (a) in react alone, (b) in pi alone, (c) on the react+pi mix, (d) on the mix, adaptive,
# each final checkpoint evaluated on the held-out split through react, pi and harnesses it never
# trained in (UNSEEN), k=K, as one checkpoint x harness matrix (OUT/matrix/matrix.md).
#
#   bash examples/recipe/harness_lesson.sh      # OUT=runs/lesson SFT_STEPS=400 RL_STEPS=10 K=4
#
# The mix's SFT data holds both harnesses' teacher episodes, MIX_REACT copies of react's and
# one of pi's (2 by default: react's episodes are short and its tool call the harder to learn
# alongside pi's; one copy each left the mix at 0.34 through react), and takes MIX_SFT_STEPS
# (SFT_STEPS per copy by default: as many passes over pi's episodes as the pi specialist's SFT,
# MIX_REACT times as many over react's).
# ARMS picks the arms to run (and put in the matrix), e.g. ARMS="mix adaptive".
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
MIX_REACT=${MIX_REACT:-2}
MIX_SFT_STEPS=${MIX_SFT_STEPS:-$(((MIX_REACT + 1) * SFT_STEPS))}
ARMS=${ARMS:-react pi mix adaptive}
RL_STEPS=${RL_STEPS:-10}
K=${K:-4}
UNSEEN=${UNSEEN:-codex,nanobot}
SEED=${SEED:-0}
for name in $ARMS; do
  case $name in react | pi | mix | adaptive) ;; *)
    echo "ARMS: unknown arm '$name' (react, pi, mix, adaptive)" >&2
    exit 2
    ;;
  esac
done
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
for _ in $(seq "$MIX_REACT"); do cat "$OUT/teacher-react/episodes.jsonl"; done |
  cat - "$OUT/teacher-pi/episodes.jsonl" >"$OUT/teacher-mix/episodes.jsonl"

arm() {  # arm NAME CONFIG TEACHER [overrides...]: SFT on TEACHER's episodes, then RL in CONFIG
  local name=$1 config=$2 data=$3
  shift 3
  local steps=$SFT_STEPS
  [ "$data" = mix ] && steps=$MIX_SFT_STEPS
  if [ ! -d "$OUT/sft-$data" ]; then
    say "SFT on the $data episodes ($steps steps)"
    "$FORGE" sft "$OUT/teacher-$data" --model "$OUT/student" --seed "$SEED" \
      --steps "$steps" --lr 1e-3 --out "$OUT/sft-$data"
  fi
  [ -d "$OUT/$name/checkpoints/step_$RL_STEPS" ] && return
  say "RL: $name"
  local t0=$SECONDS
  "$FORGE" run "$config" "policy.engine.model=$OUT/sft-$data" "runs_dir=$OUT" "name=$name" \
    "steps=$RL_STEPS" "checkpoint_every=$RL_STEPS" "$@"
  say "RL $name took $((SECONDS - t0)) s"
}
for name in $ARMS; do
  case $name in
    react) arm react examples/claw.yaml react ;;
    pi) arm pi examples/recipe/pi.yaml pi ;;
    mix) arm mix examples/recipe/mix.yaml mix ;;
    adaptive) arm adaptive examples/recipe/mix.yaml mix harness_mix=adaptive ;;
  esac
done

say "the checkpoint x harness matrix"
models=""
for name in $ARMS; do
  models="$models${models:+,}$OUT/$name/checkpoints/step_$RL_STEPS"
done
"$FORGE" eval examples/recipe/mix.yaml "policy.engine.model=$OUT/student" --model "$models" \
  --harness "react,pi,$UNSEEN" --tasks "$TEST" -k "$K" --out "$OUT/matrix"

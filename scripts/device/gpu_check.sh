#!/usr/bin/env bash
# The one prepared GPU check for the vllm engine (issue 5). Run from the repository root on a
# lent GPU machine; results go to $OUT (default /tmp/forge-device):
#   setup.log      set-up (.venv with CUDA torch 2.13.0, .venv-vllm with vllm 0.32.0)
#   tests.log      the vllm and gpu tests (the NCCL broadcast test needs two GPUs)
#   engines-*.txt  tokens/s of the vllm and torch engines on random-init Qwen2 0.5B and 1.5B
#                  (built from config: weights cannot be downloaded there), batch 1, 8 and 32,
#                  and each engine's weight-update time through the object store and through a
#                  collective broadcast, with the MiB moved. The collective backend is NCCL when
#                  the machine has three GPUs (trainer and both Policies each on their own: NCCL
#                  refuses two ranks on one device), else gloo through host memory (said in the
#                  output).
#   weight-pause.txt  the stall a weight update causes to a vLLM stream in flight, inflight keep
#                  against wait, on random-init Qwen2 0.5B (scripts/bench/weight_pause.py)
#   trainer-verl.txt  the verl trainer backend (veRL's FSDP2 actor, one rank per GPU, bf16) on a
#                  random-init Qwen2.5-0.5B-shaped model against the torch backend on the same
#                  batch: tokens/s side by side, and each backend's weight publication (gather,
#                  and broadcast into one receiver: NCCL when a GPU is left for it, else gloo).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/forge-device}
mkdir -p "$OUT"
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
backend=gloo
if [ "$gpus" -ge 3 ]; then backend=nccl; fi
echo "$gpus GPU(s): collective weight sync measured with $backend"
time bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { echo "setup failed"; tail -30 "$OUT/setup.log"; exit 1; }
.venv/bin/python -m pytest -q -m "vllm or gpu" tests/serve > "$OUT/tests.log" 2>&1
tail -5 "$OUT/tests.log"
for model in qwen2-0.5b-random qwen2-1.5b-random; do
  timeout 240 .venv/bin/python scripts/bench/engines.py --model "$model" --device cuda \
    --dtype bfloat16 --tokens 128 --reps 2 --collective-backend "$backend" \
    > "$OUT/engines-$model.txt" 2>&1
  grep -v "INFO\|WARNING\|pid=" "$OUT/engines-$model.txt" | tail -10
done
timeout 300 .venv/bin/python scripts/bench/weight_pause.py --model qwen2-0.5b-random \
  --device cuda --tokens 512 --reps 3 > "$OUT/weight-pause.txt" 2>&1
grep "^|\|^trainer" "$OUT/weight-pause.txt" | tail -5
# the verl backend: one FSDP rank per GPU Ray holds (all but the last, which the torch backend
# uses, on a machine of several); the broadcast's receiver needs a GPU of its own for NCCL
ranks=1
trainer_backend=gloo
if [ "$gpus" -ge 3 ]; then ranks=$((gpus - 2)); trainer_backend=nccl; fi
timeout 420 .venv/bin/python scripts/bench/trainer_throughput.py --model qwen2-0.5b-random \
  --device cuda --verl-ranks "$ranks" --reps 3 --prompt 1000 --sampled 200 \
  --collective-backend "$trainer_backend" --json > "$OUT/trainer-verl.txt" 2>&1
grep "^median\|^publish\|^verl\|^{" "$OUT/trainer-verl.txt" | tail -8
.venv/bin/python -m pytest -q -m gpu tests/actors/test_verl_trainer.py >> "$OUT/tests.log" 2>&1
tail -2 "$OUT/tests.log"

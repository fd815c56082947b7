#!/usr/bin/env bash
# Run the test suite (sets up .venv first). Extra arguments go to pytest, e.g. -m "not slow".
# GPU tests run on a machine with a GPU only. Tests marked full (full-size runs, and the second
# and later variants of what a default test already covers) and vllm (the vLLM engine: its own
# environment takes minutes to set up) run only when asked for: -m full, -m vllm, or
# -m "full or vllm" (then the set-up makes the vLLM environment too). Everything else runs here.
set -uo pipefail
cd "$(dirname "$0")/.."
gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi
markers="not gpu and not full and not vllm"
if [ "$gpu" = 1 ]; then markers="not full"; fi
# A -m of the caller's narrows the default tiers ("not slow": the fast tests of the default
# command); one that names a tier (full, vllm, gpu) replaces them.
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -m) shift; expr="${1-}" ;;
    -m*) expr="${1#-m}"; expr="${expr#=}" ;;
    *) args+=("$1"); shift; continue ;;
  esac
  shift || true
  case "$expr" in
    *full* | *vllm* | *gpu*) markers="$expr" ;;
    *) markers="($expr) and $markers" ;;
  esac
done
skip_vllm=1  # the vLLM environment is made only for the tiers that use it
case "$markers" in *"not vllm"*) ;; *) skip_vllm=0 ;; esac
# tests make their own small student
FORGE_SKIP_STUDENT=1 FORGE_SKIP_VLLM=${FORGE_SKIP_VLLM:-$skip_vllm} bash scripts/setup.sh || exit 1
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled
.venv/bin/ruff check . || exit 1
.venv/bin/python -m pytest --durations=25 -m "$markers" ${args[@]+"${args[@]}"}
rc=$?
if [ "$rc" = 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi
exit "$rc"

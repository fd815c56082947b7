#!/usr/bin/env bash
# Run the test suite (sets up .venv first). Extra arguments go to pytest, e.g. -m "not slow".
# GPU tests run on a machine with a GPU only; tests marked full (a full-size run of a second
# example) only when asked for (-m full); everything else runs here.
set -uo pipefail
cd "$(dirname "$0")/.."
FORGE_SKIP_STUDENT=1 bash scripts/setup.sh || exit 1  # tests make their own small student
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled
markers="not gpu and not full"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then markers="not full"; fi
.venv/bin/ruff check . || exit 1
.venv/bin/python -m pytest --durations=25 ${markers:+-m "$markers"} "$@"
rc=$?
if [ "$rc" = 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi
exit "$rc"

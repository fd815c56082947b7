#!/usr/bin/env bash
# The docs site (MkDocs, Material theme, from docs/ and mkdocs.yml), its config and CLI reference
# generated from the code on every build (scripts/docs_reference.py).
#   bash scripts/docs.sh              serve it on http://127.0.0.1:8001/, rebuilt on every edit
#   bash scripts/docs.sh build        write it to site/ (--strict: a broken link fails)
# Extra arguments go to mkdocs. Needs .venv (bash scripts/setup.sh installs mkdocs with it).
set -euo pipefail
cd "$(dirname "$0")/.."
export NO_MKDOCS_2_WARNING=1  # no banner about a successor on every build
MKDOCS=(.venv/bin/python -m mkdocs)
"${MKDOCS[@]}" --version >/dev/null 2>&1 || { echo "mkdocs not installed: bash scripts/setup.sh"; exit 1; }
if [ "${1:-serve}" = build ]; then
  shift || true
  exec "${MKDOCS[@]}" build --strict "$@"
fi
[ "${1:-}" = serve ] && shift
exec "${MKDOCS[@]}" serve --dev-addr 127.0.0.1:8001 "$@"

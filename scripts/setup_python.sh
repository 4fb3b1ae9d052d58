#!/usr/bin/env bash
# Makes the project's Python test environment, .venv-test/, with what the `python` tests need from
# PyPI: TensorBoard (whose own reader checks `train`'s event files) and Hugging Face's
# transformers with PyTorch and safetensors (which load `ckpt export-hf`'s folders and write the
# GPT-2 checkpoints `ckpt import-hf` reads), and SentencePiece's Python package (the encoder
# scripts/bench_tokenize.sh times `tokenize` against), and h5py (tools/torch_reference.py reads
# Strata's checkpoints with it, as a user's script would); a no-op when they are already importable. Run by
# scripts/test.sh; needs Debian's python3-venv (scripts/setup.sh installs it).
#
# PyPI's torch for Linux is a CUDA build whose libraries link against NVIDIA's (cuBLAS, cuDNN,
# NCCL, ...) even for CPU use: `import torch` fails without them (with --no-deps it stops at
# libcufile.so.0; the CUDA toolkit under /usr/local is older than torch's and lacks NCCL symbols
# it links). So torch comes with its dependencies, about 3 GB of wheels. PyPI's answers here are
# not kept by pip's own cache, so the wheels are downloaded once into a wheelhouse that outlives
# the clone ($STRATA_WHEELHOUSE, default ~/.cache/strata-wheels) and installed from there: a
# fresh clone's setup then downloads nothing. Versions are pinned so that the wheelhouse keeps
# serving them.
#
# The environment itself outlives the clone too: it is made once per package list (and Python
# version) under $STRATA_VENV_DIR (default ~/.cache/strata-venvs/<key>), and .venv-test is a link to
# it, so a fresh clone's setup takes a second instead of unpacking 3 GB of wheels (about 100 s).
# A lock makes concurrent setups wait for the one making it. A .venv-test that is a folder of its
# own (made by an earlier version of this script) is used as it is while it imports.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-test
packages=(tensorboard torch==2.15.0 transformers==5.24.0 safetensors==0.8.0 numpy sentencepiece==0.2.3
          h5py==3.16.0)
modules="import tensorboard, torch, transformers, safetensors, numpy, sentencepiece, h5py"
wheelhouse="${STRATA_WHEELHOUSE:-$HOME/.cache/strata-wheels}"
key=$(printf '%s\n' "${packages[@]}" "$(python3 --version)" | sha256sum | cut -c1-16)
shared="${STRATA_VENV_DIR:-$HOME/.cache/strata-venvs}/$key"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$modules" 2>/dev/null; then
  exit 0
fi
mkdir -p "$(dirname "$shared")"
exec 9>"$shared.lock"
flock 9
if ! { [ -x "$shared/bin/python" ] && "$shared/bin/python" -c "$modules" 2>/dev/null; }; then
  echo "setup_python: installing ${packages[*]} into $shared (wheels kept in $wheelhouse)"
  start=$(date +%s)
  rm -rf "$shared"
  python3 -m venv "$shared"
  mkdir -p "$wheelhouse"
  pip=("$shared/bin/python" -m pip --quiet --disable-pip-version-check --no-input)
  install=("${pip[@]}" install --no-index --find-links "$wheelhouse" "${packages[@]}")
  # From the wheelhouse alone when it holds everything; else `pip download` fetches what it lacks
  # (skipping the wheels already there) and the install runs again.
  if ! "${install[@]}" >/tmp/strata-pip.log 2>&1; then
    "${pip[@]}" download -d "$wheelhouse" "${packages[@]}" >>/tmp/strata-pip.log 2>&1 ||
      { tail -20 /tmp/strata-pip.log; exit 1; }
    "${install[@]}" >>/tmp/strata-pip.log 2>&1 || { tail -20 /tmp/strata-pip.log; exit 1; }
  fi
  echo "setup_python: done in $(($(date +%s) - start)) s"
fi
rm -rf "$venv"
ln -s "$shared" "$venv"

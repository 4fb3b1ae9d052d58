#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build, tokenize the fortunes
# corpus, train a small GPT on CPU with 2 data-parallel ranks, report val loss and a sample, and
# chart the run (the path of its overview chart is the last line).
# Without a GPU (nvidia-smi lists none) it builds the CPU backend only: compiling the CUDA kernels
# buys nothing here (scripts/test.sh configures ./build with CUDA again, for its compile check).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cuda=OFF
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && cuda=AUTO
# No tests: only the tools it runs.
STRATA_TARGETS="train tokenize eval generate plot" bash scripts/build.sh -DSTRATA_CUDA=$cuda
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

bash scripts/prepare_fortunes.sh

rm -rf runs/fortunes  # the demo starts its run afresh
mpirun --oversubscribe -np 2 build/bin/train configs/fortunes.yaml "$@"

checkpoint=$(ls runs/fortunes/checkpoints/step_*.h5 | tail -n 1)
echo
build/bin/eval --checkpoint "$checkpoint" --data data/fortunes/val
echo
build/bin/generate --checkpoint "$checkpoint" --prompt "The meaning of life is" --tokens 120 \
  --temperature 0.8 --top-k 40 --seed 7
echo
build/bin/plot runs/fortunes
echo "charts of the run: runs/fortunes/plots/overview.png" \
  "(one chart per file beside it: loss.png, lr.png, throughput.png, grad_norm.png)"

#!/usr/bin/env bash
# Side-by-side CPU benchmark of one training step, Strata vs PyTorch 2.x, for docs/PERFORMANCE.md.
#
#   scripts/bench_cpu.sh     # BUILD_DIR=build ROUNDS=3 STEPS=20 THREADS="1 2"
#                            # MODELS="small fortunes llama 124m"
#
# For every model and thread count, ROUNDS alternating rounds of `bench train` (OMP_NUM_THREADS
# only: no other variable is set, as a user runs it) and tools/bench_torch.py from the test
# environment (.venv-test: PyPI's PyTorch 2.x, eager with scaled_dot_product_attention, then
# torch.compile), each a fresh process reporting the median step of STEPS; the best round of each
# side is kept, so a round disturbed by another job on the machine does not decide the result.
# Then the GEMM library's sgemm on the small model's GEMM shapes and on a large square one (the
# machine's sgemm peak). Raw JSON lines first, then a summary.
# Models: small = 4 layers, d_model 256, 4 heads, seq_len 256, vocab 2048, micro_batch 8 (the
# defaults of both benchmarks); fortunes = configs/fortunes.yaml's GPT-2 and llama =
# configs/llama_fortunes.yaml's Llama-style block (RMSNorm, SwiGLU, RoPE, 2 key/value heads for 4,
# no biases; 2.56 M parameters without positions, as fortunes), both read by both sides with --config (4 layers, d_model
# 192, T 128, micro-batch 8, fp32); 124m = GPT-2 small (configs/gpt2_124m.yaml's shape, fp32) at
# micro-batch 1 (STEPS_124M steps, default 5). Timings are never asserted anywhere; they are numbers to report.
# The work is scripts/bench/ (python3 -m bench cpu); the settings above are
# environment variables it reads.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench cpu "$@"

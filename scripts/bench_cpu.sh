#!/usr/bin/env bash
# Side-by-side CPU benchmark of one training step, Strata vs PyTorch eager, for docs/PERFORMANCE.md.
#
#   scripts/bench_cpu.sh            # BUILD_DIR=build ROUNDS=3 STEPS=20 THREADS="1 2"
#
# For every thread count, ROUNDS alternating rounds of `bench train` (OMP_NUM_THREADS and
# OPENBLAS_NUM_THREADS) and tools/bench_torch.py (torch.set_num_threads), each a fresh process
# reporting the median step of STEPS; the best round of each side is kept, so a round disturbed by
# another job on the machine does not decide the result. Then OpenBLAS sgemm on the model's GEMM
# shapes and on a large square one (the machine's sgemm peak). Raw JSON lines first, then a summary.
# Model shape: 4 layers, d_model 256, 4 heads, seq_len 256, vocab 2048, micro_batch 8 (the
# defaults of both benchmarks). Timings are never asserted anywhere; they are numbers to report.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-20}
THREADS=${THREADS:-"1 2"}
PYTHON=/usr/bin/python3  # Debian's python3-torch lives in the system interpreter

if [[ ! -x "$BUILD_DIR/bin/bench" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$BUILD_DIR" bench >/dev/null

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

emit() {  # emit KIND THREADS JSON: one tagged line into the log and on stdout
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" | tee -a "$raw"
}

strata_train() {
  OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1 "$BUILD_DIR/bin/bench" train --steps "$STEPS"
}

torch_train() {
  OMP_NUM_THREADS=$1 "$PYTHON" tools/bench_torch.py --threads "$1" --steps "$STEPS"
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ) commit $(git rev-parse --short HEAD)" \
  "cpu '$(lscpu | sed -n 's/^Model name: *//p')' nproc $(nproc)" \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"

for ((round = 1; round <= ROUNDS; ++round)); do
  for threads in $THREADS; do
    # Alternate which side goes first so neither always runs on a warmer or cooler machine.
    if ((round % 2)); then
      emit strata "$threads" "$(strata_train "$threads")"
      emit torch "$threads" "$(torch_train "$threads")"
    else
      emit torch "$threads" "$(torch_train "$threads")"
      emit strata "$threads" "$(strata_train "$threads")"
    fi
  done
done

# (m, n, k): QKV, MLP fc, MLP proj, attention proj, LM head forward, then the square peak.
shapes="2048,768,256 2048,1024,256 2048,256,1024 2048,256,256 2048,2048,256 2048,2048,2048"
for threads in $THREADS; do
  for shape in $shapes; do
    IFS=, read -r m n k <<<"$shape"
    emit sgemm "$threads" "$(OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads \
      "$BUILD_DIR/bin/bench" sgemm --m "$m" --n "$n" --k "$k" --repeats 10)"
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$raw" <<'EOF'
import json
import sys

rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
runs = {}
for kind, threads, text in rows:
    runs.setdefault((kind, int(threads)), []).append(json.loads(text))

def best(kind, threads):
    return max(runs[(kind, threads)], key=lambda r: r["tokens_per_s"])

thread_counts = sorted({t for kind, t in runs if kind == "strata"})
peak = {t: max(r["gflops"] for r in runs[("sgemm", t)] if r["m"] == r["n"] == r["k"])
        for t in thread_counts}
print("\n== training step, best of rounds (each round: median step) ==")
print(f"{'threads':>7} {'strata tok/s':>12} {'torch tok/s':>11} {'ratio':>6} {'strata ms':>9} "
      f"{'torch ms':>8} {'strata RSS':>10} {'torch RSS':>9} {'GFLOP/s':>7} {'of peak':>7}")
for t in thread_counts:
    s, p = best("strata", t), best("torch", t)
    print(f"{t:>7} {s['tokens_per_s']:>12.0f} {p['tokens_per_s']:>11.0f} "
          f"{s['tokens_per_s'] / p['tokens_per_s']:>6.2f} {s['step_ms']:>9.1f} {p['step_ms']:>8.1f} "
          f"{s['peak_rss_mib']:>10.0f} {p['peak_rss_mib']:>9.0f} {s['gflops']:>7.1f} "
          f"{s['gflops'] / peak[t]:>7.0%}")
s_best = max((best("strata", t) for t in thread_counts), key=lambda r: r["tokens_per_s"])
p_best = max((best("torch", t) for t in thread_counts), key=lambda r: r["tokens_per_s"])
print(f"best vs best: strata {s_best['tokens_per_s']:.0f} tok/s / torch {p_best['tokens_per_s']:.0f}"
      f" tok/s (threads {p_best['threads']}) = {s_best['tokens_per_s'] / p_best['tokens_per_s']:.2f}x")
print("\n== OpenBLAS sgemm GFLOP/s (m, n, k) ==")
for t in thread_counts:
    cells = ", ".join(f"({r['m']},{r['n']},{r['k']}) {r['gflops']:.1f}" for r in runs[("sgemm", t)])
    print(f"threads {t}: {cells}")
EOF

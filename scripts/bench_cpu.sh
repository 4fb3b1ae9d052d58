#!/usr/bin/env bash
# Side-by-side CPU benchmark of one training step, Strata vs PyTorch 2.x, for docs/PERFORMANCE.md.
#
#   scripts/bench_cpu.sh     # BUILD_DIR=build ROUNDS=3 STEPS=20 THREADS="1 2" MODELS="small 124m"
#
# For every model and thread count, ROUNDS alternating rounds of `bench train` (OMP_NUM_THREADS
# only: no other variable is set, as a user runs it) and tools/bench_torch.py from the test
# environment (.venv-test: PyPI's PyTorch 2.x, eager with scaled_dot_product_attention, then
# torch.compile), each a fresh process reporting the median step of STEPS; the best round of each
# side is kept, so a round disturbed by another job on the machine does not decide the result.
# Then the GEMM library's sgemm on the small model's GEMM shapes and on a large square one (the
# machine's sgemm peak). Raw JSON lines first, then a summary.
# Models: small = 4 layers, d_model 256, 4 heads, seq_len 256, vocab 2048, micro_batch 8 (the
# defaults of both benchmarks); 124m = GPT-2 small (configs/gpt2_124m.yaml's shape, fp32) at
# micro-batch 1 (STEPS_124M steps, default 5). Timings are never asserted anywhere; they are numbers to report.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-20}
THREADS=${THREADS:-"1 2"}
MODELS=${MODELS:-"small 124m"}
STEPS_124M=${STEPS_124M:-5}
PYTHON=${PYTHON:-.venv-test/bin/python}  # scripts/setup_python.sh makes it
[[ -x $PYTHON ]] || {
  echo "error: $PYTHON is missing: run scripts/setup_python.sh" >&2
  exit 1
}

if [[ ! -x "$BUILD_DIR/bin/bench" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$BUILD_DIR" bench >/dev/null

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

emit() {  # emit KIND THREADS JSON: one tagged line into the log and on stdout
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" | tee -a "$raw"
}

model_flags() {  # model_flags MODEL: the shape flags both benchmarks take
  case $1 in
    small) echo "" ;;
    124m) echo "--n-layer 12 --n-head 12 --d-model 768 --seq-len 1024 --vocab 50304 --micro-batch 1" ;;
    *) echo "error: unknown model '$1' (small or 124m)" >&2 && exit 1 ;;
  esac
}
model_steps() { [[ $1 == 124m ]] && echo "$STEPS_124M" || echo "$STEPS"; }

strata_train() {  # strata_train MODEL THREADS
  # shellcheck disable=SC2046
  OMP_NUM_THREADS=$2 "$BUILD_DIR/bin/bench" train $(model_flags "$1") --steps "$(model_steps "$1")" \
    --warmup 1
}

torch_train() {  # torch_train MODEL THREADS: eager (SDPA) and compiled, one line each
  # shellcheck disable=SC2046
  OMP_NUM_THREADS=$2 "$PYTHON" tools/bench_torch.py $(model_flags "$1") --threads "$2" \
    --steps "$(model_steps "$1")" --warmup 2 --sdpa --modes eager,compile
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ) commit $(git rev-parse --short HEAD)" \
  "cpu '$(lscpu | sed -n 's/^Model name: *//p')' nproc $(nproc)" \
  "torch $("$PYTHON" -c 'import torch; print(torch.__version__)')" \
  "$("$BUILD_DIR/bin/bench" sgemm --m 16 --n 16 --k 16 --repeats 1 | python3 -c \
    'import json, sys; r = json.load(sys.stdin); print(r["blas"], r["blas_version"], r["blas_kernels"])')"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"

torch_lines() {  # torch_lines MODEL THREADS: each of torch_train's lines, tagged
  torch_train "$1" "$2" | while read -r line; do emit "torch $1" "$2" "$line"; done
}
for model in $MODELS; do
  for ((round = 1; round <= ROUNDS; ++round)); do
    for threads in $THREADS; do
      # Alternate which side goes first so neither always runs on a warmer or cooler machine.
      if ((round % 2)); then
        emit "strata $model" "$threads" "$(strata_train "$model" "$threads")"
        torch_lines "$model" "$threads"
      else
        torch_lines "$model" "$threads"
        emit "strata $model" "$threads" "$(strata_train "$model" "$threads")"
      fi
    done
  done
done

# (m, n, k): QKV, MLP fc, MLP proj, attention proj, LM head forward, then the square peak.
shapes="2048,768,256 2048,1024,256 2048,256,1024 2048,256,256 2048,2048,256 2048,2048,2048"
for threads in $THREADS; do
  for shape in $shapes; do
    IFS=, read -r m n k <<<"$shape"
    emit sgemm "$threads" "$(OMP_NUM_THREADS=$threads \
      "$BUILD_DIR/bin/bench" sgemm --m "$m" --n "$n" --k "$k" --repeats 10)"
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$raw" <<'EOF'
import json
import sys

rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
runs = {}
for kind, threads, text in rows:
    runs.setdefault((kind, int(threads)), []).append(json.loads(text))

def best(kind, threads, compiled=None):
    candidates = [r for r in runs.get((kind, threads), []) if "error" not in r and
                  (compiled is None or r.get("compile") == compiled)]
    return max(candidates, key=lambda r: r["tokens_per_s"]) if candidates else None

thread_counts = sorted({t for kind, t in runs if kind == "sgemm"})
peak = {t: max(r["gflops"] for r in runs[("sgemm", t)] if r["m"] == r["n"] == r["k"])
        for t in thread_counts}
models = sorted({kind.split()[1] for kind, t in runs if kind.startswith("strata ")},
                key=lambda m: m != "small")
print("\n== training step, best of rounds (each round: median step) ==")
print(f"{'model':>6} {'threads':>7} {'strata tok/s':>12} {'eager tok/s':>11} {'compiled':>9} "
      f"{'vs eager':>8} {'vs comp.':>8} {'strata RSS':>10} {'GFLOP/s':>7} {'of sgemm':>8}")
for m in models:
    for t in thread_counts:
        s = best(f"strata {m}", t)
        e, c = best(f"torch {m}", t, False), best(f"torch {m}", t, True)
        if s is None:
            continue
        ratio = lambda other: f"{s['tokens_per_s'] / other['tokens_per_s']:.2f}" if other else "-"
        rate = lambda other: f"{other['tokens_per_s']:.0f}" if other else "failed"
        print(f"{m:>6} {t:>7} {s['tokens_per_s']:>12.0f} {rate(e):>11} {rate(c):>9} "
              f"{ratio(e):>8} {ratio(c):>8} {s['peak_rss_mib']:>10.0f} {s['gflops']:>7.1f} "
              f"{s['gflops'] / peak[t]:>8.0%}")
for kind, t in sorted(runs):
    for r in runs[(kind, t)]:
        if "error" in r:
            print(f"{kind} threads {t} compile={r.get('compile')}: {r['error']}")
print("\n== sgemm GFLOP/s (m, n, k) ==")
for t in thread_counts:
    cells = ", ".join(f"({r['m']},{r['n']},{r['k']}) {r['gflops']:.1f}" for r in runs[("sgemm", t)])
    print(f"threads {t}: {cells}")
EOF

#!/usr/bin/env bash
# Communication and activation memory of 3D layouts, for docs/PERFORMANCE.md.
#
#   scripts/bench_layouts.sh          # BUILD_DIR=build STEPS=3 NP_MAX=8
#
# Trains a GPT-2 124M-shaped model (12 layers, d_model 768, 12 heads, vocab 50304; seq_len 128 so
# it runs on a CPU) for STEPS steps under several (dp, tp, pp) layouts on data/fortunes, and prints
# rank 0's bytes sent and seconds spent in communication per parallel axis in the last step, next
# to the analytic byte counts of the same step; then the activation memory of every pipeline stage
# under GPipe and 1F1B. Every replica runs m = 4 micro-batches of 2 sequences per step (8 for the
# schedule comparison). Timings on an oversubscribed CPU measure MPI over shared memory, not a
# network: the byte counts are the portable result.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-3}
PYTHON=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

ninja -C "$BUILD_DIR" train tokenize >/dev/null
bash scripts/prepare_fortunes.sh

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run NAME DP TP PP SCHEDULE SP MICRO_BATCHES: one training run; prints its metrics path.
run() {
  local name=$1 dp=$2 tp=$3 pp=$4 schedule=$5 sp=$6 m=$7
  local np=$((dp * tp * pp))
  mpirun --oversubscribe -np "$np" "$BUILD_DIR/bin/train" configs/fortunes.yaml \
    --set run.name="$name" --set run.dir="$work" \
    --set model.n_layer=12 --set model.d_model=768 --set model.n_head=12 \
    --set model.seq_len=128 --set model.vocab_size=50304 \
    --set train.steps="$STEPS" --set train.micro_batch=2 --set train.global_batch=$((dp * m * 2)) \
    --set train.eval_every=0 --set train.eval_tokens=257 --set train.log_every=1 \
    --set checkpoint.every=0 --set parallel.dp="$dp" --set parallel.tp="$tp" \
    --set parallel.pp="$pp" --set parallel.pipeline_schedule="$schedule" \
    --set parallel.sequence_parallel="$sp" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log" >&2; exit 1; }
  rm -rf "$work/$name/checkpoints"
  echo "$work/$name/metrics.jsonl"
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ) commit $(git rev-parse --short HEAD)" \
  "cpu '$(lscpu | sed -n 's/^Model name: *//p')' nproc $(nproc --all) steps $STEPS"

comm_runs=()
for layout in "2 1 1 1f1b false" "1 2 1 1f1b false" "1 2 1 1f1b true" "1 1 2 1f1b false" \
  "2 2 2 1f1b false" "2 2 2 1f1b true"; do
  read -r dp tp pp schedule sp <<<"$layout"
  name="comm_d${dp}t${tp}p${pp}_${schedule}_sp${sp}"
  comm_runs+=("$dp $tp $pp $schedule $sp $(run "$name" "$dp" "$tp" "$pp" "$schedule" "$sp" 4)")
done
memory_runs=()
for schedule in gpipe 1f1b; do
  memory_runs+=("1 1 4 $schedule false $(run "mem_$schedule" 1 1 4 "$schedule" false 8)")
done

"$PYTHON" - "$STEPS" "${comm_runs[@]}" -- "${memory_runs[@]}" <<'EOF'
import json
import sys

steps = int(sys.argv[1])
args = sys.argv[2:]
split = args.index("--")
comm_runs, memory_runs = args[:split], args[split + 1:]
L, C, T, Vp, micro, m = 12, 768, 128, 50304, 2, 4
N = micro * T  # rows of one micro-batch


def lines(path):
    return [json.loads(line) for line in open(path)]


def local_params(t, layers, first, last):
    per_layer = 2 * C + (3 * C // t) * C + 3 * C // t + C * (C // t) + C + 2 * C \
        + (4 * C // t) * C + 4 * C // t + C * (4 * C // t) + C
    return layers * per_layer + first * (Vp // t * C + T * C) + last * 2 * C


def analytic(dp, tp, pp, sp):
    """Bytes rank 0 (first stage, tp rank 0, replica 0) sends in one step, per axis."""
    layers, first, last = L // pp, 1, int(pp == 1)
    ring = lambda n: 2 * (n - 1) / n  # all-reduce: bytes sent per byte of buffer
    A = N * C * 4  # one micro-batch of residual stream, full rows
    tp_bytes = pp_bytes = dp_bytes = 0.0
    if tp > 1:
        # Per micro-batch: the embedding's sum, 2 sums per layer forward and 2 backward, the head's
        # sum of dlnf. Sequence parallelism turns each all-reduce into a reduce-scatter plus an
        # all-gather of the same total bytes.
        tp_bytes += m * (first + 4 * layers + last) * ring(tp) * A
        # The head's cross-entropy: an all-gather of row maxima and an all-reduce of 2 sums.
        tp_bytes += last * m * ((tp - 1) * N * 4 + ring(tp) * 2 * N * 4)
        tp_bytes += ring(tp) * 8  # gradient norm
        if sp:  # gradients of tensors every tp rank holds, from its own rows only
            replicated = layers * 6 * C + first * T * C + last * 2 * C
            tp_bytes += ring(tp) * replicated * 4
    if pp > 1:
        rows = N // tp if sp else N
        pp_bytes += m * rows * C * 4  # activations to stage 1 (stage 0 sends no gradients)
        pp_bytes += Vp // tp * C * 4  # the tied wte gradient, exchanged with the last stage
        pp_bytes += 2 * ring(pp) * 8  # gradient norm and loss
    if dp > 1:
        dp_bytes += ring(dp) * (local_params(tp, layers, first, last) * 4 + 8)
    return {"tp": tp_bytes, "pp": pp_bytes, "dp": dp_bytes}


print("\n== GPT-2 124M shape (T=128, 4 micro-batches of 2 per replica): rank 0, step", steps, "==")
print(f"{'dp tp pp':>8} {'sp':>5} | {'axis':>4} {'measured MiB':>12} {'analytic MiB':>12} "
      f"{'match':>5} {'comm s':>7} | {'step s':>6}")
for run in comm_runs:
    dp, tp, pp, schedule, sp, path = run.split()
    dp, tp, pp, sp = int(dp), int(tp), int(pp), sp == "true"
    last = [x for x in lines(path) if "loss" in x][-1]
    expect = analytic(dp, tp, pp, sp)
    for axis in ("tp", "pp", "dp"):
        size = {"tp": tp, "pp": pp, "dp": dp}[axis]
        if size == 1:
            continue
        got = last["comm_bytes_by_axis"][axis]
        print(f"{dp:>2} {tp:>2} {pp:>2} {str(sp).lower():>5} | {axis:>4} {got / 2**20:>12.3f} "
              f"{expect[axis] / 2**20:>12.3f} {'yes' if got == expect[axis] else 'NO':>5} "
              f"{last['comm_seconds_by_axis'][axis]:>7.3f} | {last['step_ms'] / 1000:>6.2f}")

print("\n== activation memory per pipeline stage, pp 4 (3 layers each), 8 micro-batches of 2 ==")
for run in memory_runs:
    dp, tp, pp, schedule, sp, path = run.split()
    summary = [x for x in lines(path) if "activation_mib_by_stage" in x][-1]
    cells = ", ".join(f"{mib:.1f}" for mib in summary["activation_mib_by_stage"])
    print(f"{schedule:>6}: [{cells}] MiB by stage")
EOF

#!/usr/bin/env bash
# ZeRO stages side by side, for docs/PERFORMANCE.md.
#
#   scripts/bench_zero.sh          # BUILD_DIR=build STEPS=2 DP=4 PER_NODE=2 STAGES="0 1 2 3"
#                                  # REDUCTION=step ACCUM=1
#
# Trains a GPT-2 124M-shaped model (12 layers, d_model 768, 12 heads, vocab 50304; seq_len 128 so
# it runs on a CPU) on data/fortunes with DP data-parallel ranks, nodes simulated as blocks of
# PER_NODE ranks, under each ZeRO stage that runs, and prints for rank 0: the memory account
# (metrics.jsonl memory_bytes) next to its formula, the measured peak RSS, the bytes sent in the
# last step by kind and link class next to the analytic count, and the median step time.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-2}
DP=${DP:-4}
PER_NODE=${PER_NODE:-2}
REDUCTION=${REDUCTION:-step}  # parallel.zero.gradient_reduction (stages 2 and 3)
ACCUM=${ACCUM:-1}             # micro-batches per rank and step
STAGES=${STAGES:-"0 1 2 3"}
source scripts/bench_setup.sh

bench_header "steps $STEPS dp $DP gpus_per_node $PER_NODE"
runs=()
for stage in $STAGES; do
  name="zero$stage"
  mpirun --oversubscribe -np "$DP" "$BUILD_DIR/bin/train" configs/fortunes.yaml \
    --set run.name="$name" --set run.dir="$work" \
    --set model.n_layer=12 --set model.d_model=768 --set model.n_head=12 \
    --set model.seq_len=128 --set model.vocab_size=50304 \
    --set train.steps="$STEPS" --set train.micro_batch=2 --set train.global_batch=$((DP * 2 * ACCUM)) \
    --set train.eval_every=0 --set train.eval_tokens=257 --set train.log_every=1 \
    --set checkpoint.every=0 --set parallel.dp="$DP" --set parallel.gpus_per_node="$PER_NODE" \
    --set parallel.zero.stage="$stage" --set parallel.zero.gradient_reduction="$REDUCTION" \
    >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log" >&2; exit 1; }
  runs+=("$stage $work/$name/metrics.jsonl")
done

"$PYTHON" - "$DP" "$PER_NODE" "$REDUCTION" "$ACCUM" "${runs[@]}" <<'PY'
import json, statistics, sys

dp, per_node, reduction, accum = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
runs = [(int(arg.split()[0]), arg.split()[1]) for arg in sys.argv[5:]]
# The layout's parameter count (ParameterLayout: wte padded to 50304, wpe, 12 blocks, lnf).
C, L, V, T = 768, 12, 50304, 128
total = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
align = 64
def padded(n, shards):
    unit = align * shards
    return max(1, -(-n // unit)) * unit
# The layout's segments (ParameterLayout::segments), as element ranges.
segments, at = [], 0
for name, size in [("wte", V * C), ("wpe", T * C)] + [(f"h.{i}", 12 * C * C + 13 * C)
                                                        for i in range(L)] + [("lnf", 2 * C)]:
    segments.append((name, at, at + size))
    at += size
assert at == total

print(f"\nper-rank memory (rank 0), MiB; parameters {total}")
print(f"{'stage':>5} {'master':>9} {'grads':>9} {'optimizer':>10} {'formula':>9} {'model state':>12}"
      f" {'x stage 0':>9} {'gathered':>9} {'buckets':>9} {'activations':>12} {'peak RSS':>9}"
      f" {'step ms':>9}")
state0 = 16 * padded(total, 1)
lines = {}
for stage, path in runs:
    rows = [json.loads(l) for l in open(path)]
    train = [r for r in rows if "loss" in r]
    lines[stage] = train[-1]
    m = train[-1]["memory_bytes"]
    sharded = stage >= 1 and dp > 1
    owned = padded(total, dp) // dp if sharded else padded(total, 1)
    whole = padded(total, dp if sharded else 1)
    formula = 8 * owned
    state = sum(m[k] for k in ("master_weights", "compute_weights", "gradients",
                               "optimizer_state", "secondary_weights"))
    mib = lambda b: b / 2**20
    print(f"{stage:>5} {mib(m['master_weights']):9.1f} {mib(m['gradients']):9.1f}"
          f" {mib(m['optimizer_state']):10.1f} {mib(formula):9.1f} {mib(state):12.1f}"
          f" {state / state0:9.3f} {mib(m['gathered_weights']):9.1f}"
          f" {mib(m['gradient_buckets']):9.1f} {mib(m['activations']):12.1f}"
          f" {rows[-1]['peak_rss_mib']:9.0f}"
          f" {statistics.median(r['step_ms'] for r in train[1:] or train):9.0f}")
    assert m["optimizer_state"] == formula, (stage, m["optimizer_state"], formula)
    assert m["master_weights"] == 4 * (owned if stage == 3 and sharded else whole), stage
    assert m["gradients"] == 4 * (owned if stage >= 2 and sharded else whole), stage

def chunk(whole, n):  # bytes one rank sends in a ring reduce-scatter or all-gather
    return whole // n * (n - 1) if n > 1 else 0
def all_reduce(bytes_, n):  # ... and in a ring all-reduce
    return 2 * bytes_ * (n - 1) // n if n > 1 else 0

print("\nrank 0's bytes in the last step by kind (link classes), measured | analytic")
scalar = all_reduce(8, dp)  # the loss, summed over dp in double
for stage, _ in runs:
    comm = lines[stage]["comm_bytes"]
    sharded = stage >= 1 and dp > 1
    shard = padded(total, dp) // dp
    def piece(segment, r):  # the segment's elements in shard r
        return max(0, min(segment[2], (r + 1) * shard) - max(segment[1], r * shard))
    # Uneven rings: rank 0 sends all of a segment but its own piece (reduce-scatter), all but its
    # successor's (all-gather).
    segment_rs = sum(4 * (s[2] - s[1] - piece(s, 0)) for s in segments)
    def gathers(names):
        return sum(4 * (s[2] - s[1] - piece(s, 1)) for n in names for s in segments if s[0] == n)
    blocks = [f"h.{i}" for i in range(L)]
    # Stage 3, per micro-batch: forward wte (embedding), wpe, the blocks, lnf, wte (head);
    # backward wte and lnf (head), the blocks.
    stage3_gathers = accum * gathers(["wte", "wpe"] + blocks + ["lnf", "wte", "wte", "lnf"] + blocks)
    # Segment reduce-scatters: once per step, or once per micro-batch.
    rs_times = accum if reduction == "micro_batch" else 1
    if sharded and stage >= 2:
        expected = {"reduce_scatter": rs_times * segment_rs,
                    "all_gather": chunk(padded(total, dp) * 4, dp) if stage == 2 else stage3_gathers,
                    "all_reduce": 2 * scalar}
    elif sharded:  # reduce-scatter of the padded buffer, all-gather of it; loss and norm over dp
        buffer = padded(total, dp) * 4
        expected = {"reduce_scatter": chunk(buffer, dp), "all_gather": chunk(buffer, dp),
                    "all_reduce": 2 * scalar}
    else:  # the all-reduce of the gradients (the layout, unpadded) and the loss
        expected = {"all_reduce": all_reduce(total * 4, dp) + scalar}
    for kind, by_link in comm.items():
        measured = sum(by_link.values())
        links = ", ".join(f"{link} {b}" for link, b in by_link.items())
        print(f"  stage {stage} {kind:>14}: {measured:>12} | {expected.get(kind, 0):>12}  ({links})")
        assert measured == expected.get(kind, 0), (stage, kind)
PY

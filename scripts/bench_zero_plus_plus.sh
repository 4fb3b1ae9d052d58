#!/usr/bin/env bash
# ZeRO-3 and its ZeRO++ switches side by side, for docs/PERFORMANCE.md.
#
#   scripts/bench_zero_plus_plus.sh     # BUILD_DIR=build STEPS=2 DP=8 PER_NODE=4
#
# Trains a GPT-2 124M-shaped model (12 layers, d_model 768, 12 heads, vocab 50304; seq_len 128 so
# it runs on a CPU) on data/fortunes with DP data-parallel ranks simulated as nodes of PER_NODE
# ranks, at ZeRO stage 3 alone, with each of qwZ, hpZ and qgZ, and with all three, and prints the
# bytes the whole job sent in the last step by link class (metrics.jsonl comm_bytes_job) next to
# the analytic count, the ratio of cross-node bytes to ZeRO-3's, rank 0's memory account and peak
# RSS, and the median step time. The script fails if a measured count differs from the formula.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-2}
DP=${DP:-8}
PER_NODE=${PER_NODE:-4}
source scripts/bench_setup.sh

bench_header "steps $STEPS dp $DP gpus_per_node $PER_NODE"
runs=()
for variant in zero3 qwz hpz qgz all; do
  switches=()
  case $variant in
    qwz) switches=(--set parallel.zero.quantized_weights=true) ;;
    hpz) switches=(--set parallel.zero.hierarchical_partition=true) ;;
    qgz) switches=(--set parallel.zero.quantized_gradients=true) ;;
    all) switches=(--set parallel.zero.quantized_weights=true
                   --set parallel.zero.hierarchical_partition=true
                   --set parallel.zero.quantized_gradients=true) ;;
  esac
  mpirun --oversubscribe -np "$DP" "$BUILD_DIR/bin/train" configs/fortunes.yaml \
    --set run.name="$variant" --set run.dir="$work" \
    --set model.n_layer=12 --set model.d_model=768 --set model.n_head=12 \
    --set model.seq_len=128 --set model.vocab_size=50304 \
    --set train.steps="$STEPS" --set train.micro_batch=1 --set train.global_batch="$DP" \
    --set train.eval_every=0 --set train.eval_tokens=257 --set train.log_every=1 \
    --set checkpoint.every=0 --set parallel.dp="$DP" --set parallel.gpus_per_node="$PER_NODE" \
    --set parallel.zero.stage=3 "${switches[@]}" >"$work/$variant.log" 2>&1 ||
    { cat "$work/$variant.log" >&2; exit 1; }
  runs+=("$variant $work/$variant/metrics.jsonl")
done

"$PYTHON" - "$DP" "$PER_NODE" "${runs[@]}" <<'PY'
import json, statistics, sys

dp, per_node = int(sys.argv[1]), int(sys.argv[2])
runs = [(arg.split()[0], arg.split()[1]) for arg in sys.argv[3:]]
C, L, V, T = 768, 12, 50304, 128
total = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
align, weight_block, gradient_block = 64, 2048, 512  # parallel/zero/segment_collectives.h
def padded(n, shards):
    unit = align * shards
    return max(1, -(-n // unit)) * unit
shard = padded(total, dp) // dp
segments, at = {}, 0
for name, size in [("wte", V * C), ("wpe", T * C)] + [(f"h.{i}", 12 * C * C + 13 * C)
                                                        for i in range(L)] + [("lnf", 2 * C)]:
    segments[name] = (at, at + size)
    at += size
def piece(name, r):  # elements of segment `name` in shard r
    b, e = segments[name]
    return max(0, min(e, (r + 1) * shard) - max(b, r * shard))
def size(name):
    return segments[name][1] - segments[name][0]
def packed(elements, block, bits):  # model/kernels/quantize_block.h: scales, payload, to 4 bytes
    blocks = -(-elements // block)
    payload = elements if bits == 8 else (elements // block) * (block // 2) + -(-(elements % block) // 2)
    return -(-(4 * blocks + payload) // 4) * 4
def node_piece(name, local):  # hpZ: the segment cut evenly over the node's ranks
    n, k = size(name), -(-size(name) // per_node)
    return max(0, min(k, n - local * k))
blocks = [f"h.{i}" for i in range(L)]
forward = ["wte", "wpe"] + blocks + ["lnf", "wte"]   # per micro-batch (one per rank here)
backward = ["wte", "lnf"] + blocks

def expected(variant):
    qwz, hpz, qgz = (variant in ("qwz", "all"), variant in ("hpz", "all"), variant in ("qgz", "all"))
    out = {"intra_node": 0, "inter_node": 0}
    for r in range(dp):
        node, local, succ = r // per_node, r % per_node, (r + 1) % dp
        ring = "intra_node" if succ // per_node == node else "inter_node"
        for n in forward:   # forward gathers over dp: all pieces but the successor's
            out[ring] += (sum(packed(piece(n, q), weight_block, 8) for q in range(dp) if q != succ)
                          if qwz else 4 * (size(n) - piece(n, succ)))
        for n in backward:  # backward gathers: over dp, or (hpZ) inside the node
            if hpz:
                out["intra_node"] += 4 * (size(n) - node_piece(n, (local + 1) % per_node))
            else:
                out[ring] += 4 * (size(n) - piece(n, succ))
        for n in segments:  # the gradient reduce-scatter, once per step
            if qgz and size(n) >= gradient_block * dp:
                for p in range(per_node):   # hop 1: to node peer p the pieces of local index p
                    if p != local:
                        out["intra_node"] += sum(packed(piece(n, j * per_node + p), gradient_block, 4)
                                                 for j in range(dp // per_node))
                for j in range(dp // per_node):  # hop 2: to node j the partial of (j, local)
                    if j != node:
                        out["inter_node"] += packed(piece(n, j * per_node + local), gradient_block, 4)
            else:
                out[ring] += 4 * (size(n) - piece(n, r))
        # the loss and the grad norm, summed over dp in double (ring all-reduces of 8 bytes)
        out[ring] += 2 * (2 * 8 * (dp - 1) // dp)
    return out

print(f"\nbytes the job sent in the last step, by link class: measured | analytic")
print(f"{'variant':>8} {'cross-node':>14} {'(formula)':>14} {'x ZeRO-3':>9} {'intra-node':>14}"
      f" {'(formula)':>14} {'secondary MiB':>14} {'gathered MiB':>13} {'peak RSS':>9} {'step ms':>8}")
base = None
for variant, path in runs:
    rows = [json.loads(l) for l in open(path)]
    train = [r for r in rows if "loss" in r]
    job, m, want = train[-1]["comm_bytes_job"], train[-1]["memory_bytes"], expected(variant)
    base = base or job["inter_node"]
    print(f"{variant:>8} {job['inter_node']:>14} {want['inter_node']:>14}"
          f" {job['inter_node'] / base:9.3f} {job['intra_node']:>14} {want['intra_node']:>14}"
          f" {m['secondary_weights'] / 2**20:14.1f} {m['gathered_weights'] / 2**20:13.1f}"
          f" {rows[-1]['peak_rss_mib']:9.0f}"
          f" {statistics.median(r['step_ms'] for r in train[1:] or train):8.0f}")
    assert job == want, (variant, job, want)
    print(f"{'':>8} loss per step {[round(r['loss'], 4) for r in train]}")
PY

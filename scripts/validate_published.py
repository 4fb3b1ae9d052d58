#!/usr/bin/env python3
"""The planner against published measurements, for docs/PLANNER.md.

    scripts/validate_published.py [--build build]

Source: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC '21 (arXiv 2104.04473), measured on Selene (DGX A100 80GB, 8 x 200 Gb/s HDR
InfiniBand per node): configs/clusters/a100_sxm_ib200.yaml. Every model has sequence length 2048
and vocabulary 51,200, trains in 16-bit precision with activation recomputation, and the paper
reports teraFLOP/s per GPU counting F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) FLOPs per
iteration (Eq. 3: forward, backward and the recomputed forward). For each published layout,
`plan --layout given` predicts the step time; the prediction is turned into the paper's unit with
the same F, and compared.

  * Figures 14 and 15 (5.9B: 32 layers, 32 heads, h 3840; micro-batch 1; 64 GPUs): pipeline x
    data and tensor x data layouts at several global batches. The numbers are the plotted
    points (the paper prints none), read from the figures' vector data.
  * Figure 13 (161B: 32 layers, 128 heads, h 20480; 64 GPUs): pipeline x tensor at batch 32 and
    128, micro-batch not stated (1 assumed here).
  Layouts with tensor parallelism across nodes (t = 16, 32 on 8-GPU nodes) are ones Strata
  refuses (a tensor-parallel group must stay inside a node): listed as "refused", not predicted.
  * Table 1 (weak scaling, 1.7B to 1T on up to 3072 GPUs): printed in the paper. It used the
    interleaved schedule, which Strata does not have: the plain 1F1B prediction bounds it from
    below where pipelines are deep; the micro-batch is not stated (1 assumed).
For each series the Spearman rank correlation of predicted against published throughput, the
pairs of layouts the prediction orders against the paper (of those whose published values differ
by more than 3%), and how the paper measured the planner's first choice against its fastest, say
whether the planner orders those layouts as the paper measured them.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rank_correlation import discordant_pairs, spearman  # noqa: E402

S, V = 2048, 51200
CLUSTER = "configs/clusters/a100_sxm_ib200.yaml"
# Published throughputs closer than this are not ordered: run-to-run variation of such
# measurements is a few percent, and the figures' points carry no error bars.
RESOLUTION = 0.03

# (series, layers, heads, hidden, tp, pp, dp, global batch, published TFLOP/s per GPU)
FIG14 = [(b, 32, 32, 3840, 1, p, 64 // p, b, tf) for b, row in
         [(32, [62, 56, 53, 49, 43]), (512, [148, 141, 129, 114, 90])]
         for p, tf in zip([2, 4, 8, 16, 32], row)]
FIG15 = [(b, 32, 32, 3840, t, 1, 64 // t, b, tf) for b, row in
         [(32, [56, 54, 55, 36, 22]), (128, [103, 88, 70, 39, 22]), (512, [127, 104, 75, 40, 22])]
         for t, tf in zip([2, 4, 8, 16, 32], row)]
FIG13 = [(b, 32, 128, 20480, t, 64 // t, 1, b, tf) for b, row in
         [(32, [103, 134, 140, 111, 91]), (128, [107, 146, 165, 162, 148])]
         for t, tf in zip([32, 16, 8, 4, 2], row)]
TABLE1 = [("table 1", l, a, h, t, p, g // (t * p), b, tf) for a, h, l, t, p, g, b, tf in [
    (24, 2304, 24, 1, 1, 32, 512, 137), (32, 3072, 30, 2, 1, 64, 512, 138),
    (32, 4096, 36, 4, 1, 128, 512, 142), (48, 6144, 40, 8, 1, 256, 1024, 135),
    (64, 8192, 48, 8, 2, 512, 1536, 138), (80, 10240, 60, 8, 4, 1024, 1792, 140),
    (96, 12288, 80, 8, 8, 1536, 2304, 148), (128, 16384, 96, 8, 16, 1920, 2160, 155),
    (128, 20480, 105, 8, 35, 2520, 2520, 163), (160, 25600, 128, 8, 64, 3072, 3072, 163)]]


def flops_per_iteration(batch, layers, hidden):
    return 96 * batch * S * layers * hidden ** 2 * (1 + S / (6 * hidden) + V / (16 * layers * hidden))


def predict(build, work, layers, heads, hidden, tp, pp, dp, batch):
    config = os.path.join(work, "model.yaml")
    with open(config, "w") as f:
        f.write(f"""model: {{n_layer: {layers}, n_head: {heads}, d_model: {hidden}, seq_len: {S}, vocab_size: {V}}}
data: {{train: unused}}
train: {{global_batch: {batch}, micro_batch: 1}}
precision: {{compute: fp16}}
recompute: full
device: cuda
parallel: {{tp: {tp}, pp: {pp}, dp: {dp}, gpus_per_node: 8}}
""")
    out = subprocess.run([os.path.join(build, "bin", "plan"), config, "--cluster", CLUSTER,
                          "--world", str(tp * pp * dp), "--layout", "given", "--json", "true"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        if "must divide parallel.gpus_per_node" in out.stderr:
            return None  # tensor parallelism across nodes: Strata refuses it
        sys.exit(out.stderr)
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    args = parser.parse_args()
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    with tempfile.TemporaryDirectory() as work:
        for title, rows in [("Figure 14: 5.9B, pipeline x data, 64 GPUs", FIG14),
                            ("Figure 15: 5.9B, tensor x data, 64 GPUs", FIG15),
                            ("Figure 13: 161B, pipeline x tensor, 64 GPUs", FIG13),
                            ("Table 1: weak scaling (interleaved schedule in the paper)", TABLE1)]:
            print(f"\n### {title}\n")
            print("| batch | layers/h | (t, p, d) | published TFLOP/s | predicted | error | predicted step s | bubble | memory GiB |")
            print("|---|---|---|---:|---:|---:|---:|---:|---:|")
            series = {}
            for key, l, a, h, t, p, d, b, published in rows:
                r = predict(args.build, work, l, a, h, t, p, d, b)
                if r is None:
                    print(f"| {b} | {l}/{h} | ({t}, {p}, {d}) | {published} | refused | | | | |")
                    continue
                step = r["step_ms"] / 1e3
                tflops = flops_per_iteration(b, l, h) / (step * t * p * d) / 1e12
                error = tflops / published - 1
                series.setdefault(key, []).append((published, tflops))
                fits = "" if r["fits"] else " (over the limit)"
                print(f"| {b} | {l}/{h} | ({t}, {p}, {d}) | {published} | {tflops:.0f} | {100 * error:+.0f}% "
                      f"| {step:.2f} | {100 * r['bubble']:.0f}% | {r['memory_bytes'] / 2**30:.1f}{fits} |")
            errors = [abs(pr / pu - 1) for rows_ in series.values() for pu, pr in rows_]
            print(f"\nmedian |error| {100 * statistics.median(errors):.0f}%, max {100 * max(errors):.0f}%")
            for key, pairs in series.items():
                if len(pairs) < 3:
                    continue
                published, predicted = [x for x, _ in pairs], [y for _, y in pairs]
                wrong, compared = discordant_pairs(published, predicted, RESOLUTION)
                label = "rows (different models)" if key == "table 1" else f"batch {key}"
                choice = published[predicted.index(max(predicted))]
                best = "" if key == "table 1" else (
                    "; the planner's first choice is the paper's fastest" if choice == max(published)
                    else f"; the planner's first choice measured {100 * (1 - choice / max(published)):.0f}% "
                         "below the paper's fastest")
                print(f"{label}: Spearman {spearman(published, predicted):.2f}; "
                      f"{wrong} of {compared} pairs apart by more than {100 * RESOLUTION:.0f}% ordered wrongly{best}")

if __name__ == "__main__":
    main()

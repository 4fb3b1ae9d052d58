"""scripts/bench_zero_plus_plus.sh: ZeRO-3 and its ZeRO++ switches side by side.

A GPT-2 124M-shaped model (seq_len 128) trains on DP data-parallel ranks simulated as nodes of
PER_NODE ranks, at ZeRO stage 3 alone, with each of qwZ, hpZ and qgZ, and with all three. For each:
the bytes the whole job sent in the last step by link class (metrics.jsonl comm_bytes_job) beside
the planner's count for the same config (comm_bytes_job of `plan --explain`), the cross-node ratio
to ZeRO-3's, rank 0's memory and the median step. The benchmark fails where a count differs."""
import os
import sys

from bench import explain, matrix, metrics

MODEL = ["model.n_layer=12", "model.d_model=768", "model.n_head=12", "model.seq_len=128",
         "model.vocab_size=50304"]
SWITCHES = {"zero3": [],
            "qwz": ["parallel.zero.quantized_weights=true"],
            "hpz": ["parallel.zero.hierarchical_partition=true"],
            "qgz": ["parallel.zero.quantized_gradients=true"],
            "all": ["parallel.zero.quantized_weights=true",
                    "parallel.zero.hierarchical_partition=true",
                    "parallel.zero.quantized_gradients=true"]}


def overrides(variant, steps, dp, per_node):
    return MODEL + [
        f"train.steps={steps}", "train.micro_batch=1", f"train.global_batch={dp}",
        "train.eval_every=0", "train.eval_tokens=257", "train.log_every=1", "checkpoint.every=0",
        f"parallel.dp={dp}", f"parallel.gpus_per_node={per_node}", "parallel.zero.stage=3",
        *SWITCHES[variant]]


def rows(variant, lines, want, base):
    """The variant's two lines: job bytes by link class against the planner's `want`, the
    cross-node ratio to `base` (ZeRO-3's cross-node bytes), memory and step time; then its losses."""
    train = metrics.training(lines)
    job, m = train[-1]["comm_bytes_job"], train[-1]["memory_bytes"]
    return [f"{variant:>8} {job['inter_node']:>14} {want['inter_node']:>14}"
            f" {job['inter_node'] / base:9.3f} {job['intra_node']:>14} {want['intra_node']:>14}"
            f" {m['secondary_weights'] / 2**20:14.1f} {m['gathered_weights'] / 2**20:13.1f}"
            f" {lines[-1]['peak_rss_mib']:9.0f} {metrics.median_step_ms(train):8.0f}",
            f"{'':>8} loss per step {[round(r['loss'], 4) for r in train]}"]


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    steps = int(os.environ.get("STEPS", "2"))
    dp = int(os.environ.get("DP", "8"))
    per_node = int(os.environ.get("PER_NODE", "4"))
    matrix.allow_mpirun_as_root()
    matrix.build(build_dir, ["train", "tokenize", "plan"])
    matrix.prepare_fortunes(build_dir)
    plan = os.path.join(build_dir, "bin", "plan")
    with matrix.Scratch() as work:
        print(matrix.header(f"steps {steps} dp {dp} gpus_per_node {per_node}"), flush=True)
        cluster = explain.write_cpu_cluster(os.path.join(work, "cluster.yaml"), dp)
        runs = [(variant, metrics.read(matrix.train(
            build_dir, dp, overrides(variant, steps, dp, per_node), variant, work)))
            for variant in SWITCHES]

        print("\nbytes the job sent in the last step, by link class: measured | analytic")
        print(f"{'variant':>8} {'cross-node':>14} {'(formula)':>14} {'x ZeRO-3':>9} {'intra-node':>14}"
              f" {'(formula)':>14} {'secondary MiB':>14} {'gathered MiB':>13} {'peak RSS':>9}"
              f" {'step ms':>8}")
        base = None
        for variant, lines in runs:
            want = explain.explain(plan, "configs/fortunes.yaml", cluster, dp, [
                f"run.dir={work}", *overrides(variant, steps, dp, per_node)])["comm_bytes_job"]
            job = metrics.training(lines)[-1]["comm_bytes_job"]
            base = base or job["inter_node"]
            print("\n".join(rows(variant, lines, want, base)))
            if job != want:
                print(f"error: {variant}: the job sent {job}, the planner counts {want}",
                      file=sys.stderr)
                return 1

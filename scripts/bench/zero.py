"""scripts/bench_zero.sh: ZeRO stages side by side.

A GPT-2 124M-shaped model (seq_len 128) trains on DP data-parallel ranks, nodes simulated as
blocks of PER_NODE ranks, under each ZeRO stage of STAGES. For rank 0: its memory account
(metrics.jsonl memory_bytes) beside the planner's, the peak RSS, and the bytes of the last step
by collective kind beside the planner's count (`plan --explain`: memory_bytes_by_stage[0] and
comm_bytes of the same config). The benchmark fails where a measured figure differs."""
import os
import sys

from bench import explain, matrix, metrics

MODEL = ["model.n_layer=12", "model.d_model=768", "model.n_head=12", "model.seq_len=128",
         "model.vocab_size=50304"]


def overrides(stage, steps, dp, per_node, reduction, accum):
    return MODEL + [
        f"train.steps={steps}", "train.micro_batch=2", f"train.global_batch={dp * 2 * accum}",
        "train.eval_every=0", "train.eval_tokens=257", "train.log_every=1", "checkpoint.every=0",
        f"parallel.dp={dp}", f"parallel.gpus_per_node={per_node}", f"parallel.zero.stage={stage}",
        f"parallel.zero.gradient_reduction={reduction}"]


def memory_row(stage, lines, predicted, state0):
    """Rank 0's account in MiB beside the predicted optimizer state ("formula"), and its model
    state as a fraction of stage 0's (`state0` bytes)."""
    train = metrics.training(lines)
    m = train[-1]["memory_bytes"]
    state = metrics.model_state(m)

    def mib(b):
        return b / 2**20
    return (f"{stage:>5} {mib(m['master_weights']):9.1f} {mib(m['gradients']):9.1f}"
            f" {mib(m['optimizer_state']):10.1f} {mib(predicted['optimizer_state']):9.1f}"
            f" {mib(state):12.1f} {state / state0:9.3f} {mib(m['gathered_weights']):9.1f}"
            f" {mib(m['gradient_buckets']):9.1f} {mib(m['activations']):12.1f}"
            f" {lines[-1]['peak_rss_mib']:9.0f} {metrics.median_step_ms(train):9.0f}")


def memory_mismatches(measured, predicted):
    """The model-state fields where the run's account differs from the planner's."""
    return [k for k in ("master_weights", "gradients", "optimizer_state")
            if measured[k] != predicted[k]]


def comm_rows(stage, comm_bytes, predicted):
    """Per collective kind of the run: measured bytes | predicted, and the measured link classes;
    and whether every kind matched."""
    want = metrics.bytes_by_kind(predicted)
    rows, match = [], True
    for kind, by_link in comm_bytes.items():
        measured = sum(by_link.values())
        links = ", ".join(f"{link} {b}" for link, b in by_link.items())
        rows.append(f"  stage {stage} {kind:>14}: {measured:>12} | {want.get(kind, 0):>12}  ({links})")
        match &= measured == want.get(kind, 0)
    return rows, match


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    steps = int(os.environ.get("STEPS", "2"))
    dp = int(os.environ.get("DP", "4"))
    per_node = int(os.environ.get("PER_NODE", "2"))
    reduction = os.environ.get("REDUCTION", "step")  # parallel.zero.gradient_reduction (2 and 3)
    accum = int(os.environ.get("ACCUM", "1"))  # micro-batches per rank and step
    stages = [int(s) for s in os.environ.get("STAGES", "0 1 2 3").split()]
    matrix.allow_mpirun_as_root()
    matrix.build(build_dir, ["train", "tokenize", "plan"])
    matrix.prepare_fortunes(build_dir)
    plan = os.path.join(build_dir, "bin", "plan")
    with matrix.Scratch() as work:
        print(matrix.header(f"steps {steps} dp {dp} gpus_per_node {per_node}"), flush=True)
        cluster = explain.write_cpu_cluster(os.path.join(work, "cluster.yaml"), dp)

        def figures(stage):
            return explain.explain(plan, "configs/fortunes.yaml", cluster, dp, [
                f"run.dir={work}", *overrides(stage, steps, dp, per_node, reduction, accum)])

        runs = [(stage, metrics.read(matrix.train(
            build_dir, dp, overrides(stage, steps, dp, per_node, reduction, accum),
            f"zero{stage}", work))) for stage in stages]
        predicted = {stage: figures(stage) for stage in stages}
        stage0 = predicted[0] if 0 in predicted else figures(0)  # the "x stage 0" base
        state0 = metrics.model_state(stage0["memory_bytes_by_stage"][0])
        parameters = stage0["parameters"]

        print(f"\nper-rank memory (rank 0), MiB; parameters {parameters}")
        print(f"{'stage':>5} {'master':>9} {'grads':>9} {'optimizer':>10} {'formula':>9}"
              f" {'model state':>12} {'x stage 0':>9} {'gathered':>9} {'buckets':>9}"
              f" {'activations':>12} {'peak RSS':>9} {'step ms':>9}")
        failed = []
        for stage, lines in runs:
            account = predicted[stage]["memory_bytes_by_stage"][0]
            print(memory_row(stage, lines, account, state0))
            wrong = memory_mismatches(metrics.training(lines)[-1]["memory_bytes"], account)
            failed += [f"stage {stage} memory {k}" for k in wrong]

        print("\nrank 0's bytes in the last step by kind (link classes), measured | analytic")
        for stage, lines in runs:
            rows, match = comm_rows(stage, metrics.training(lines)[-1]["comm_bytes"],
                                    predicted[stage]["comm_bytes"])
            print("\n".join(rows))
            if not match:
                failed.append(f"stage {stage} bytes")
        if failed:
            print(f"error: measured figures differ from the planner's: {', '.join(failed)}",
                  file=sys.stderr)
            return 1

"""scripts/bench_layouts.sh: communication and activation memory of 3D layouts.

A GPT-2 124M-shaped model (seq_len 128) trains STEPS steps under several (dp, tp, pp) layouts;
rank 0's bytes per parallel axis in the last step are printed beside the planner's count for the
same config (comm_bytes_by_axis of `plan --explain`), then every pipeline stage's activation
memory under GPipe and 1F1B."""
import os
import shutil

from bench import explain, matrix, metrics

MODEL = ["model.n_layer=12", "model.d_model=768", "model.n_head=12", "model.seq_len=128",
         "model.vocab_size=50304"]
# (dp, tp, pp, schedule, sequence parallel) of the communication runs.
COMM_LAYOUTS = [(2, 1, 1, "1f1b", False), (1, 2, 1, "1f1b", False), (1, 2, 1, "1f1b", True),
                (1, 1, 2, "1f1b", False), (2, 2, 2, "1f1b", False), (2, 2, 2, "1f1b", True)]


def overrides(dp, tp, pp, schedule, sp, micro_batches, steps):
    """The run's keys: every replica runs `micro_batches` micro-batches of 2 sequences."""
    return MODEL + [
        f"train.steps={steps}", "train.micro_batch=2",
        f"train.global_batch={dp * micro_batches * 2}", "train.eval_every=0",
        "train.eval_tokens=257", "train.log_every=1", "checkpoint.every=0", f"parallel.dp={dp}",
        f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.pipeline_schedule={schedule}",
        f"parallel.sequence_parallel={str(sp).lower()}"]


def comm_rows(layout, last, analytic):
    """The table's rows of one layout: per axis of size > 1, measured (the last training line's
    comm_bytes_by_axis) against `analytic` (the planner's)."""
    dp, tp, pp, _, sp = layout
    rows = []
    for axis, size in (("tp", tp), ("pp", pp), ("dp", dp)):
        if size == 1:
            continue
        got, want = last["comm_bytes_by_axis"][axis], analytic[axis]
        rows.append(f"{dp:>2} {tp:>2} {pp:>2} {str(sp).lower():>5} | {axis:>4} {got / 2**20:>12.3f} "
                    f"{want / 2**20:>12.3f} {'yes' if got == want else 'NO':>5} "
                    f"{last['comm_seconds_by_axis'][axis]:>7.3f} | {last['step_ms'] / 1000:>6.2f}")
    return rows


def memory_row(schedule, lines):
    summary = metrics.last_with(lines, "activation_mib_by_stage")
    cells = ", ".join(f"{mib:.1f}" for mib in summary["activation_mib_by_stage"])
    return f"{schedule:>6}: [{cells}] MiB by stage"


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    steps = int(os.environ.get("STEPS", "3"))
    os.environ["OMP_NUM_THREADS"] = "1"
    matrix.allow_mpirun_as_root()
    matrix.build(build_dir, ["train", "tokenize", "plan"])
    matrix.prepare_fortunes(build_dir)
    plan = os.path.join(build_dir, "bin", "plan")
    with matrix.Scratch() as work:
        print(matrix.header(f"steps {steps}"), flush=True)

        def run(name, layout, micro_batches):
            sets = overrides(*layout, micro_batches, steps)
            dp, tp, pp = layout[:3]
            path = matrix.train(build_dir, dp * tp * pp, sets, name, work)
            shutil.rmtree(os.path.join(work, name, "checkpoints"), ignore_errors=True)
            return path, sets

        comm = []
        for layout in COMM_LAYOUTS:
            dp, tp, pp, schedule, sp = layout
            comm.append((layout, *run(f"comm_d{dp}t{tp}p{pp}_{schedule}_sp{str(sp).lower()}",
                                      layout, 4)))
        memory = [(schedule, run(f"mem_{schedule}", (1, 1, 4, schedule, False), 8)[0])
                  for schedule in ("gpipe", "1f1b")]

        cluster = explain.write_cpu_cluster(os.path.join(work, "cluster.yaml"), 8)
        print("\n== GPT-2 124M shape (T=128, 4 micro-batches of 2 per replica): rank 0, step",
              steps, "==")
        print(f"{'dp tp pp':>8} {'sp':>5} | {'axis':>4} {'measured MiB':>12} {'analytic MiB':>12} "
              f"{'match':>5} {'comm s':>7} | {'step s':>6}")
        for layout, path, sets in comm:
            dp, tp, pp = layout[:3]
            figures = explain.explain(plan, "configs/fortunes.yaml", cluster, dp * tp * pp,
                                      [f"run.dir={work}", *sets])
            last = metrics.training(metrics.read(path))[-1]
            for row in comm_rows(layout, last, figures["comm_bytes_by_axis"]):
                print(row)

        print("\n== activation memory per pipeline stage, pp 4 (3 layers each), 8 micro-batches"
              " of 2 ==")
        for schedule, path in memory:
            print(memory_row(schedule, metrics.read(path)))

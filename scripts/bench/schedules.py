"""scripts/bench_schedules.sh: the pipeline schedules side by side on 8 ranks.

A 16-layer GPT (d_model 256, 4 heads, seq_len 128) trains STEPS steps on data/fortunes under
every schedule (gpipe, 1f1b, zb-h1, zb-h2, and interleaved and zbv with two chunks of layers per
rank) at pp 4 (dp 2) and pp 8, with 8 to 32
micro-batches of one sequence per replica, ROUNDS times each (ranks bound to cores as the planner
benchmark binds them; the round with the lowest median step is reported: 8 ranks on 2 cores make
single rounds noisy). Per run: the median step time; per pipeline stage the time of its
program and its idle time in it (pipeline_ms_by_stage and pipeline_idle_ms_by_stage of the run's
metrics: time inside the pipeline's transfers, waiting for a neighbour included), next to the
planner's timed simulation of the same config on this machine as `bench calibrate` describes it
(8 ranks sharing its cores: plan/timed_pipeline.h, where other ranks fill a stage's bubble); the
activation memory per stage next to the planner's account; and the bubble the schedule leaves on
dedicated devices (the same clock and durations, no core sharing)."""
import os
import re

from bench import explain, matrix, metrics

MODEL = ["model.n_layer=16", "model.d_model=256", "model.n_head=4", "model.seq_len=128"]
PLACEMENT = ("--oversubscribe", "--map-by", "core", "--bind-to", "core:overload-allowed")
# (schedule, chunks of layers per rank: parallel.virtual_stages)
SCHEDULES = [("gpipe", 1), ("1f1b", 1), ("zb-h1", 1), ("zb-h2", 1), ("interleaved", 2), ("zbv", 2)]
# (pp, dp, micro-batches per replica)
SHAPES = [(4, 2, 8), (4, 2, 32), (8, 1, 16), (8, 1, 32)]


def overrides(pp, dp, micro_batches, schedule, chunks, steps):
    return MODEL + [f"parallel.virtual_stages={chunks}",
        f"train.steps={steps}", "train.micro_batch=1", f"train.global_batch={dp * micro_batches}",
        "train.eval_every=0", "train.eval_tokens=129", "train.log_every=1", "checkpoint.every=0",
        f"parallel.pp={pp}", f"parallel.dp={dp}", f"parallel.pipeline_schedule={schedule}"]


def dedicated(cluster_text):
    """The calibrated cluster with every rank on a core of its own: no core sharing."""
    return re.sub(r"(?m)^(cores_per_node|waiting_share|busy_latency_us):.*\n", "", cluster_text)


def cells(values, digits=1):
    return "[" + ", ".join(f"{v:.{digits}f}" for v in values) + "]"


def fastest(runs):
    """Of several rounds' metrics lines, the round with the lowest median step."""
    return min(runs, key=lambda lines: metrics.median_step_ms(metrics.training(lines)))


def run_rows(label, lines, shared, alone):
    """The report of one run: its measured figures (metrics lines) against the planner's
    `explain` objects on shared cores (`shared`) and on dedicated ones (`alone`)."""
    step_ms = metrics.median_step_ms(metrics.training(lines))
    done = metrics.last_with(lines, "pipeline_idle_ms_by_stage")
    predicted_mib = [stage["activations"] / 2**20 for stage in shared["memory_bytes_by_stage"]]
    return [
        f"{label}: step {step_ms:.1f} ms; planner (shared cores) bubble "
        f"{100 * shared['bubble_fraction']:.1f}%, dedicated devices "
        f"{100 * alone['bubble_fraction']:.1f}%",
        f"    program ms by stage  measured {cells(done['pipeline_ms_by_stage'])}"
        f"  timed simulation {cells(shared['pipeline_ms_by_stage'])}",
        f"    idle ms by stage     measured {cells(done['pipeline_idle_ms_by_stage'])}"
        f"  timed simulation {cells(shared['pipeline_idle_ms_by_stage'])}",
        f"    activation MiB       measured {cells(done['activation_mib_by_stage'], 2)}"
        f"  planner {cells(predicted_mib, 2)}"]


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    steps = int(os.environ.get("STEPS", "10"))
    rounds = int(os.environ.get("ROUNDS", "2"))
    ranks = 8
    os.environ["OMP_NUM_THREADS"] = "1"
    matrix.allow_mpirun_as_root()
    matrix.build(build_dir, ["train", "tokenize", "plan", "bench"])
    matrix.prepare_fortunes(build_dir)
    bin_dir = os.path.join(build_dir, "bin")
    with matrix.Scratch() as work:
        shared_cluster = os.path.join(work, "cluster.yaml")
        calibration = explain.calibrate(os.path.join(bin_dir, "bench"), ranks, shared_cluster,
                                        PLACEMENT, rows=128, width=256, seq_len=128, heads=4)
        alone_cluster = os.path.join(work, "dedicated.yaml")
        with open(shared_cluster) as file, open(alone_cluster, "w") as out:
            out.write(dedicated(file.read()))
        print(matrix.header(f"ranks {ranks} steps {steps} rounds {rounds} load {matrix.load()}"))
        print(calibration, flush=True)
        plan = os.path.join(bin_dir, "plan")
        for pp, dp, micro_batches in SHAPES:
            print(f"\n== pp {pp}, dp {dp}, {micro_batches} micro-batches of 1 x 128 tokens ==",
                  flush=True)
            for schedule, chunks in SCHEDULES:
                sets = overrides(pp, dp, micro_batches, schedule, chunks, steps)
                lines = fastest([metrics.read(matrix.train(
                    build_dir, ranks, sets, f"pp{pp}_m{micro_batches}_{schedule}_{r}", work,
                    mpirun=PLACEMENT)) for r in range(rounds)])
                priced = [explain.explain(plan, "configs/fortunes.yaml", cluster, ranks,
                                          [f"run.dir={work}", *sets])
                          for cluster in (shared_cluster, alone_cluster)]
                for row in run_rows(f"{schedule:>11}", lines, *priced):
                    print(row, flush=True)

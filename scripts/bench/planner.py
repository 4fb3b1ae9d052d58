"""scripts/validate_planner.sh: the planner against measurements on this machine.

`bench calibrate` describes this machine for RANKS ranks; for each layout of LAYOUTS and the
planner's own first choice, `plan --layout given` predicts the step time and rank 0's memory and
`train` runs STEPS steps (median of steps 3 to STEPS; rank 0's memory account and peak RSS), every
layout ROUNDS times one round after the other. Then a markdown table and the summary: Spearman
rank correlation and median relative error of the step time, the same for memory, and how the
planner's first choice compares with the fastest measured layout."""
import json
import os
import shutil
import statistics

from bench import explain, matrix, metrics
from rank_correlation import spearman

# Rank r runs on core r mod cores. Unbound, the kernel moves oversubscribed ranks between cores as
# it likes, and one layout's step time changed by up to 33% from one run to the next (bimodal);
# bound round-robin, every stage and group has its ranks spread evenly over the cores, as the
# model's processor sharing assumes, and runs repeat within about 4%.
PLACEMENT = ("--oversubscribe", "--map-by", "core", "--bind-to", "core:overload-allowed")
LAYOUTS = [
    "parallel.dp=8 train.micro_batch=4",
    "parallel.dp=8 train.micro_batch=4 parallel.zero.stage=1",
    "parallel.dp=8 train.micro_batch=1 parallel.zero.stage=3",
    "parallel.tp=2 train.micro_batch=4",
    "parallel.tp=2 parallel.sequence_parallel=true recompute=full train.micro_batch=8",
    "parallel.tp=4 train.micro_batch=4",
    "parallel.tp=8 train.micro_batch=8",
    "parallel.pp=2 train.micro_batch=2",
    "parallel.pp=4 parallel.pipeline_schedule=gpipe train.micro_batch=4",
    "parallel.pp=8 train.micro_batch=1",
    "parallel.tp=2 parallel.pp=2 train.micro_batch=2",
    "parallel.tp=2 parallel.pp=2 parallel.zero.stage=2 recompute=selective train.micro_batch=4",
    "parallel.pp=2 parallel.zero.stage=2 parallel.zero.gradient_reduction=micro_batch"
    " train.micro_batch=1",
    "parallel.tp=2 parallel.pp=4 parallel.pipeline_schedule=gpipe train.micro_batch=2",
    "parallel.pp=2 recompute=full train.micro_batch=4",
    "parallel.dp=8 parallel.zero.stage=2 recompute=full train.micro_batch=2",
    "parallel.tp=4 parallel.sequence_parallel=true train.micro_batch=2",
]


def model(steps, work):
    """The validation model: fortunes' data and vocabulary, 8 layers of width 256, 8 heads."""
    return ["model.n_layer=8", "model.n_head=8", "model.d_model=256", "model.seq_len=128",
            "train.global_batch=32", f"train.steps={steps}", "train.eval_every=0",
            "train.log_every=1", "checkpoint.every=0", f"run.dir={work}"]


def result(lines, predicted, choice):
    """One run against its prediction (plan's JSON line for the layout)."""
    train = metrics.training(lines)
    return {"layout": predicted["layout"], "choice": choice,
            "measured_ms": metrics.median_step_ms(train, skip=2),
            "predicted_ms": predicted["step_ms"],
            "measured_account": sum(train[-1]["memory_bytes"].values()),
            "predicted_account": predicted["rank0_memory_bytes"],
            "rss_mib": max(r["peak_rss_mib"] for r in train)}


def report(runs):
    """The table and summary of the results of every round."""
    rows = []  # one per layout: the median over its rounds
    for layout in dict.fromkeys(r["layout"] + str(r["choice"]) for r in runs):
        same = [r for r in runs if r["layout"] + str(r["choice"]) == layout]
        row = dict(same[0])
        row["measured_ms"] = statistics.median(r["measured_ms"] for r in same)
        row["rounds_ms"] = [r["measured_ms"] for r in same]
        rows.append(row)
    out = ["\n| layout | predicted ms | measured ms (rounds) | error | predicted MiB | account MiB"
           " | peak RSS MiB |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        err = r["predicted_ms"] / r["measured_ms"] - 1
        mark = " (planner's choice)" if r["choice"] else ""
        rounds = ", ".join(f"{x:.0f}" for x in r["rounds_ms"])
        out.append(f"| {r['layout']}{mark} | {r['predicted_ms']:.1f} | {r['measured_ms']:.1f}"
                   f" ({rounds}) | {100 * err:+.1f}% | {r['predicted_account'] / 2**20:.2f}"
                   f" | {r['measured_account'] / 2**20:.2f} | {r['rss_mib']:.1f} |")
    p = [r["predicted_ms"] for r in rows]
    m = [r["measured_ms"] for r in rows]
    errors = [abs(a / b - 1) for a, b in zip(p, m)]
    fastest = min(m)
    choice = [r for r in rows if r["choice"]][0]
    equal = sum(r["predicted_account"] == r["measured_account"] for r in rows)
    out += [f"\nstep time: Spearman {spearman(p, m):.3f}, median |error|"
            f" {100 * statistics.median(errors):.1f}%, max |error| {100 * max(errors):.1f}% over"
            f" {len(rows)} layouts",
            f"memory: Spearman (predicted account vs peak RSS) "
            f"{spearman([r['predicted_account'] for r in rows], [r['rss_mib'] for r in rows]):.3f};"
            f" account equal to the prediction in {equal}/{len(rows)} layouts",
            f"planner's choice: {choice['layout']}, measured {choice['measured_ms']:.1f} ms;"
            f" fastest measured {fastest:.1f} ms"
            f" ({[r['layout'] for r in rows if r['measured_ms'] == fastest][0]}):"
            f" {100 * (choice['measured_ms'] / fastest - 1):+.1f}%"]
    return out


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    steps = int(os.environ.get("STEPS", "10"))
    ranks = int(os.environ.get("RANKS", "8"))
    rounds = int(os.environ.get("ROUNDS", "2"))
    matrix.allow_mpirun_as_root()
    matrix.build(build_dir, ["train", "tokenize", "plan", "bench"])
    matrix.prepare_fortunes(build_dir)
    bin_dir = os.path.join(build_dir, "bin")
    with matrix.Scratch() as work:
        cluster = os.path.join(work, "cluster.yaml")
        calibration = explain.calibrate(os.path.join(bin_dir, "bench"), ranks, cluster, PLACEMENT,
                                        rows=512, width=256, seq_len=128, heads=8)
        print(matrix.header(f"ranks {ranks} steps {steps} rounds {rounds}"))
        print(calibration, flush=True)

        def plan(*extra, overrides=()):
            return matrix.output([os.path.join(bin_dir, "plan"), "configs/fortunes.yaml",
                                  "--cluster", cluster, "--world", str(ranks), *extra, "--json",
                                  "true", *matrix.sets(model(steps, work) + list(overrides))])

        layouts = LAYOUTS + [json.loads(plan("--top", "1"))["overrides"]]
        runs = []
        for round_ in range(1, rounds + 1):
            for i, layout in enumerate(layouts):
                sets = layout.split()
                predicted = json.loads(plan("--layout", "given", overrides=sets))
                name = f"layout_{i}_{round_}"
                path = matrix.train(build_dir, ranks, model(steps, work) + sets, name, work,
                                    mpirun=PLACEMENT)
                runs.append(result(metrics.read(path), predicted, i == len(layouts) - 1))
                shutil.rmtree(os.path.join(work, name))
        print("\n".join(report(runs)))

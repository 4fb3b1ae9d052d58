"""scripts/bench_diloco.sh: DiLoCo against data-parallel training at equal compute.

The demo model on the fortunes corpus. The baselines train data-parallel on WORKERS ranks with a
global batch of WORKERS·BATCH sequences, at the config's learning rate and at twice it; each
DiLoCo variant runs WORKERS workers of one rank with BATCH sequences each. Every rank is a node of
its own. One table row per run as it ends: final val_loss, its gap to the first baseline, the
bytes sent across the worker boundary (baselines: across nodes) and how many times fewer."""
import os

from bench import matrix, metrics


def variants(steps):
    """(name, settings) in table order; H scaled to the run: STEPS/30, STEPS/6 and STEPS/3 (10,
    50 and 100 at 300 steps); streaming needs F = 4 to divide H, so its H is STEPS/6 rounded down
    to a multiple of 4."""
    small, mid, large = steps // 30, steps // 6, steps // 3
    streaming = mid // 4 * 4
    lr2 = "optimizer.lr=4.0e-3 optimizer.min_lr=4.0e-4"  # twice the config's
    # "tuned": outer momentum 0.5 instead of 0.9, the inner learning rate doubled (PERFORMANCE.md)
    tuned = f"diloco.outer_momentum=0.5 {lr2}"
    h = "diloco.inner_steps="
    return [
        ("baseline", ""), ("baseline_lr2", lr2), (f"h{small}", f"{h}{small}"),
        (f"h{mid}", f"{h}{mid}"), (f"h{large}", f"{h}{large}"),
        (f"h{mid}_int8", f"{h}{mid} diloco.compression=int8"),
        (f"h{mid}_int4", f"{h}{mid} diloco.compression=int4"),
        (f"h{mid}_int4_ef", f"{h}{mid} diloco.compression=int4 diloco.error_feedback=true"),
        (f"h{streaming}_f4", f"{h}{streaming} diloco.fragments=4"),
        (f"h{mid}_overlap", f"{h}{mid} diloco.overlap=true"),
        (f"h{mid}_butterfly", f"{h}{mid} diloco.averaging=butterfly"),
        (f"h{mid}_gossip", f"{h}{mid} diloco.averaging=gossip"),
        (f"h{mid}_moshpit", f"{h}{mid} diloco.averaging=moshpit"),
        (f"h{small}_tuned", f"{h}{small} {tuned}"),
        (f"h{mid}_int8_tuned", f"{h}{mid} diloco.compression=int8 {tuned}"),
        (f"h{large}_tuned", f"{h}{large} {tuned}")]


def summary(lines):
    """(final val_loss, bytes across the worker boundary, seconds of outer syncs, of them hidden
    behind inner steps). Across nodes: the step lines; across workers: every sync's own line (a
    sync applied after the last step, with overlap, is in no step line)."""
    val, cross, sync, hidden = None, 0, 0.0, 0.0
    for m in lines:
        if "val_loss" in m:
            val = m["val_loss"]
        if "outer_sync_s" in m:
            sync += m["outer_sync_s"]
            hidden += m["outer_hidden_s"]
        if "comm_bytes_job" in m:
            cross += m["comm_bytes_job"].get("inter_node", 0)
        if "outer_comm_bytes_job" in m:
            cross += m["outer_comm_bytes_job"].get("inter_worker", 0)
    return val, cross, sync, hidden


def row(name, settings, lines, baseline):
    """The run's table row; `baseline` the first baseline's lines, or None when it did not run."""
    val, cross, sync, hidden = summary(lines)
    label = settings.replace("diloco.", "") or "the config's"
    if name.startswith("baseline"):
        label = "data-parallel, batch × workers, " + label
    if hidden > 0:
        label += f" ({hidden:.2f} of {sync:.2f} s of syncs hidden)"
    if baseline is None:
        return f"| {name} | {label} | {val:.4f} | | {cross / 1e6:.1f} MB | |"
    base_val, base_bytes, _, _ = summary(baseline)
    gap = (val - base_val) / base_val * 100
    ratio = f"{base_bytes / cross:.0f}×" if cross else "∞"
    return f"| {name} | {label} | {val:.4f} | {gap:+.2f}% | {cross / 1e6:.1f} MB | {ratio} |"


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    steps = int(os.environ.get("STEPS", "300"))
    batch = int(os.environ.get("BATCH", "8"))
    workers = int(os.environ.get("WORKERS", "4"))
    chosen = os.environ.get("VARIANTS", "all").split()
    matrix.allow_mpirun_as_root()
    matrix.build(build_dir, ["train", "tokenize"])
    matrix.prepare_fortunes(build_dir)
    common = [f"train.steps={steps}", f"train.micro_batch={batch}", "train.eval_every=0",
              "train.log_every=100", "checkpoint.every=0", "parallel.gpus_per_node=1"]
    with matrix.Scratch() as work:
        print(matrix.header(f"steps {steps} workers {workers} batch {batch} per worker"))
        table(build_dir, work, workers, batch, common, variants(steps), chosen)


def train_variant(build_dir, work, workers, batch, common, name, settings, extra=()):
    """Trains one (name, settings) under `common` overrides and `extra` arguments: a name starting
    "baseline" data-parallel on `workers` ranks at global batch workers·batch, any other
    `workers` DiLoCo workers of `batch` sequences. Returns its metrics.jsonl, or None after
    printing the failed row."""
    keys = settings.split()
    if name.startswith("baseline"):
        keys.append(f"train.global_batch={workers * batch}")
    else:
        keys += [f"train.global_batch={batch}", "diloco.enabled=true", f"diloco.workers={workers}"]
    path = matrix.train(build_dir, workers, common + keys, name, work, fail="return", extra=extra)
    if path is None:
        error = matrix.first_error(os.path.join(work, f"{name}.log"))
        print(f"| {name} | failed: {error} |", flush=True)
    return path


def table(build_dir, work, workers, batch, common, runs, chosen, extra=()):
    """Trains each (name, settings) of `runs` that `chosen` names ("all": every one) under
    `common` overrides and prints its row: names starting "baseline" data-parallel on `workers`
    ranks at global batch workers·batch, the others `workers` DiLoCo workers of `batch`
    sequences; `extra` train arguments for every run (e.g. --init)."""
    print("| run | settings | val_loss | vs data-parallel | bytes across workers | fewer bytes |")
    print("|---|---|---|---|---|---|", flush=True)
    for name, settings in runs:
        if chosen != ["all"] and name not in chosen:
            continue
        path = train_variant(build_dir, work, workers, batch, common, name, settings, extra)
        if path is None:
            continue
        base = os.path.join(work, "baseline", "metrics.jsonl")
        print(row(name, settings, metrics.read(path),
                  metrics.read(base) if os.path.exists(base) else None), flush=True)

"""scripts/bench_robust_diloco.sh: what robust averaging and authentication cost, and what robust
averaging buys (docs/PERFORMANCE.md, "Robust and authenticated DiLoCo").

Part 1, in one job: WORKERS DiLoCo workers of one rank each train the demo model on fortunes (the
warm-up shortened to a tenth of the run, so that a short run learns), one
worker misbehaving at every sync through the test hook poison_outer (STRATA_TEST_HOOKS): its outer
gradient ×1e3 (`scale`) or plus Gaussian noise of 3× its RMS (`noise`, within the default screen).
Each row: the final val_loss and its gap to the clean mean's, the seconds and bytes per sync (the
averaging's wall time on the slowest rank, bytes across the worker boundary), who was left out.

Part 2, between jobs: two elastic worker jobs in a file store, without and with a secret
(diloco.secret_file): seconds per sync (outer_wall_s: deciding the members, connecting with the
handshake, averaging, settling) and the store's bytes at the end."""
import os
import subprocess

from bench import matrix, metrics

SCREEN_OFF = "diloco.outlier_factor=0"


def part1_runs():
    """(name, settings, poison) in table order."""
    rules = [("mean", ""), ("trimmed_mean", "diloco.aggregation=trimmed_mean"),
             ("centered_clip", "diloco.aggregation=centered_clip")]
    runs = [(f"clean_{r}", s, "") for r, s in rules]
    runs += [(f"clean_{r}_int8", f"{s} diloco.compression=int8", "")
             for r, s in rules if r != "trimmed_mean"]
    runs += [(f"scaled_{r}_screen_off", f"{s} {SCREEN_OFF}", "scale:3") for r, s in rules]
    runs.append(("scaled_mean_screened", "", "scale:3"))
    runs.append(("nan_mean_screened", "", "nan:3"))
    runs += [(f"noise_{r}", s, "noise:3") for r, s in rules]
    return runs


def sync_figures(lines):
    """(syncs, mean seconds per sync, mean bytes per sync, the members left out)."""
    syncs = [m for m in lines if "outer_step" in m]
    if not syncs:
        return 0, 0.0, 0.0, ""
    seconds = sum(m["outer_sync_s"] for m in syncs) / len(syncs)
    sent = sum(m["outer_comm_bytes_job"].get("inter_worker", 0) for m in syncs) / len(syncs)
    left = sorted({o["worker"] for m in syncs for o in m.get("left_out", [])})
    return len(syncs), seconds, sent, ",".join(map(str, left))


def part1(build_dir, work, workers, common):
    print("| run | settings | poison | val_loss | vs clean mean | s per sync | bytes per sync | "
          "left out |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    clean = None
    for name, settings, poison in part1_runs():
        keys = common + settings.split() + ["diloco.enabled=true", f"diloco.workers={workers}"]
        env_before = os.environ.pop("STRATA_TEST_HOOKS", None)
        if poison:
            os.environ["STRATA_TEST_HOOKS"] = f"poison_outer={poison}"
        path = matrix.train(build_dir, workers, keys, name, work, fail="return")
        os.environ.pop("STRATA_TEST_HOOKS", None)
        if env_before is not None:
            os.environ["STRATA_TEST_HOOKS"] = env_before
        if path is None:
            print(f"| {name} | failed: {matrix.first_error(os.path.join(work, name + '.log'))} |")
            continue
        lines = metrics.read(path)
        val = metrics.final_val_loss(lines)
        clean = val if clean is None else clean
        _, seconds, sent, left = sync_figures(lines)
        gap = (val - clean) / clean * 100
        print(f"| {name} | {settings.replace('diloco.', '') or 'mean'} | {poison or '-'} | "
              f"{val:.4f} | {gap:+.2f}% | {seconds * 1000:.1f} ms | {sent / 1e3:.1f} kB | "
              f"{left or '-'} |", flush=True)


def elastic_pair(build_dir, work, tag, common, secret):
    """Two worker jobs of group `tag` in a fresh file store; returns (their metrics, store bytes)."""
    store = os.path.join(work, f"store_{tag}")
    jobs = []
    for w in range(2):
        keys = common + ["diloco.enabled=true", "diloco.workers=2", f"diloco.join=file://{store}",
                         f"diloco.group={tag}", f"diloco.slot={w}", "diloco.min_workers=2",
                         "diloco.interface=lo", f"run.name={tag}_{w}", f"run.dir={work}"]
        if secret:
            keys.append(f"diloco.secret_file={secret}")
        log = open(os.path.join(work, f"{tag}_{w}.log"), "w")
        jobs.append(subprocess.Popen(
            ["mpirun", "--oversubscribe", "-np", "1", os.path.join(build_dir, "bin", "train"),
             "configs/fortunes.yaml", *matrix.sets(keys)], stdout=log, stderr=subprocess.STDOUT))
    if any(job.wait() != 0 for job in jobs):
        raise SystemExit(f"elastic pair {tag} failed: see {work}/{tag}_*.log")
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(store) for f in files)
    return [metrics.read(os.path.join(work, f"{tag}_{w}", "metrics.jsonl")) for w in range(2)], size


def part2(build_dir, work, common):
    secret = os.path.join(work, "group.secret")
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as out:
        out.write("a benchmark's group secret of 32+\n")
    print("| group | s per sync (wall) | of it averaging | store bytes at the end |")
    print("|---|---|---|---|", flush=True)
    for tag, file in (("open", None), ("secret", secret)):
        runs, size = elastic_pair(build_dir, work, tag, common, file)
        syncs = [m for m in runs[0] if "outer_step" in m]
        wall = sum(m["outer_wall_s"] for m in syncs) / len(syncs)
        averaging = sum(m["outer_sync_s"] for m in syncs) / len(syncs)
        label = "unauthenticated" if file is None else "with a secret"
        print(f"| {label} | {wall * 1000:.1f} ms | {averaging * 1000:.1f} ms | {size} |", flush=True)


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    steps = int(os.environ.get("STEPS", "100"))
    batch = int(os.environ.get("BATCH", "8"))
    workers = int(os.environ.get("WORKERS", "4"))
    inner = int(os.environ.get("INNER_STEPS", "10"))
    matrix.allow_mpirun_as_root()
    matrix.build(build_dir, ["train", "tokenize"])
    matrix.prepare_fortunes(build_dir)
    common = [f"train.steps={steps}", f"train.micro_batch={batch}", f"train.global_batch={batch}",
              "train.eval_every=0", "train.log_every=100", "checkpoint.every=0",
              "parallel.gpus_per_node=1", f"diloco.inner_steps={inner}",
              f"optimizer.warmup_steps={max(1, steps // 10)}"]
    with matrix.Scratch() as work:
        print(matrix.header(f"steps {steps} workers {workers} batch {batch} per worker, "
                            f"H {inner}"))
        part1(build_dir, work, workers, common)
        print()
        part2(build_dir, work, common)

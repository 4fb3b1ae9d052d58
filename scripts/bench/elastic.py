"""scripts/bench_elastic.sh: elastic DiLoCo's compute utilisation across an emulated WAN.

WORKERS worker jobs (one rank, one thread each) in network namespaces joined by scripts/wan.sh
links of RTT_MS round trip, meeting in a Redis store in the root namespace. The link's bandwidth
is scaled so that one outer sync takes about RATIO inner steps, the ratio OpenDiLoCo reports (a
1.1B model, H 500, all-reduce 6.9% of training time: 0.069 · 500 / 0.931 ≈ 37 steps), since the
model here is far smaller; the ratio measured is printed with the table. Runs: synchronous data
parallelism across the same link (H 1 with outer lr 1 and no momentum: the parameters averaged
after every step, the bytes of a gradient all-reduce), then DiLoCo at H 50, 200 and 500.

Per run, averaged over the workers: compute utilisation (the inner steps' time over the training
loop's wall time, which every step's step_ms covers, syncs included) and the share of that time
in the all-reduce itself (outer_sync_s), next to the sync's whole time (outer_wall_s: waiting for
the other workers, connecting, averaging)."""
import os
import statistics
import subprocess
import time

from bench import matrix, metrics


def worker_command(build_dir, config, run, index, settings):
    """The train command of worker `index` inside its namespace."""
    sets = " ".join(f"--set {s}" for s in settings)
    return (f"bash scripts/wan.sh exec {index} mpirun --oversubscribe -np 1 {build_dir}/bin/train "
            f"{config} --set run.name={run}_{index} {sets}")


def run_group(build_dir, config, run, workers, settings, log_dir):
    """Starts the workers together and waits for them; the runs' metrics lines, per worker."""
    jobs = []
    for w in range(workers):
        log = open(os.path.join(log_dir, f"{run}_{w}.log"), "w")
        jobs.append((subprocess.Popen(worker_command(build_dir, config, run, w, settings),
                                      shell=True, stdout=log, stderr=subprocess.STDOUT), log))
    for job, log in jobs:
        if job.wait() != 0:
            raise SystemExit(f"{run}: a worker failed; see {log.name}")
        log.close()
    return [metrics.read(f"runs/{run}_{w}/metrics.jsonl") for w in range(workers)]


def figures(lines):
    """(utilisation, all-reduce share, median inner step s, mean sync wall s, syncs) of one
    worker's run."""
    steps = metrics.training(lines)
    syncs = [m for m in lines if "outer_wall_s" in m]
    synced = {m["step"] for m in syncs}
    total = sum(m["step_ms"] for m in steps) / 1e3
    wall = sum(m["outer_wall_s"] for m in syncs)
    reduce = sum(m["outer_sync_s"] for m in syncs)
    inner = [m["step_ms"] / 1e3 for m in steps[1:] if m["step"] not in synced]
    if not inner:  # every step syncs (H 1): the step's time less its sync's
        wall_of = {m["step"]: m["outer_wall_s"] for m in syncs}
        inner = [m["step_ms"] / 1e3 - wall_of[m["step"]] for m in steps[1:]]
    step = statistics.median(inner)
    return (total - wall) / total, reduce / total, step, wall / max(1, len(syncs)), len(syncs)


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    config = os.environ.get("CONFIG", "configs/fortunes_diloco.yaml")
    workers = int(os.environ.get("WORKERS", "2"))
    rtt = float(os.environ.get("RTT_MS", "100"))
    ratio = float(os.environ.get("RATIO", "37"))
    port = int(os.environ.get("REDIS_PORT", "6391"))
    log_dir = os.environ.get("RUN_DIR", "/tmp/bench_elastic")
    os.makedirs(log_dir, exist_ok=True)
    matrix.allow_mpirun_as_root()
    # A model small enough that 500 inner steps take a minute or two on a core.
    model = ["model.d_model=64", "model.seq_len=64", "train.global_batch=8",
             "train.micro_batch=8", "train.eval_every=0", "threads=1", "checkpoint.every=0",
             "parallel.dp=1"]
    # The step time and the sync's bytes, measured without the WAN: one worker alone.
    calibrate = "elastic_calibrate"
    subprocess.run(f"rm -rf runs/{calibrate}", shell=True, check=True)
    subprocess.run(f"mpirun --oversubscribe -np 1 {build_dir}/bin/train {config} "
                   f"--set run.name={calibrate} --set diloco.enabled=false --set train.steps=30 "
                   + " ".join(f"--set {s}" for s in model), shell=True, check=True,
                   stdout=subprocess.DEVNULL)
    lines = metrics.read(f"runs/{calibrate}/metrics.jsonl")
    step_s = metrics.median_step_ms(metrics.training(lines), skip=5) / 1e3
    params = lines[0]["memory_bytes"]["master_weights"] / 4
    sent = 2 * (workers - 1) / workers * 4 * params  # a ring all-reduce's bytes per worker
    rate_bits = sent * 8 / (ratio * step_s)
    rate = os.environ.get("RATE", f"{max(1, round(rate_bits / 1e3))}kbit")
    print(f"calibration: inner step {step_s * 1e3:.1f} ms, {params / 1e6:.2f}M parameters, a sync "
          f"sends {sent / 1e6:.2f} MB per worker; link {rate} and {rtt:g} ms RTT for a sync of "
          f"about {ratio:g} steps", flush=True)

    subprocess.run(f"bash scripts/wan.sh up {workers} --rtt-ms {rtt:g} --rate {rate}", shell=True,
                   check=True, stdout=subprocess.DEVNULL)
    redis = subprocess.Popen(f"exec redis-server --bind 10.77.0.254 --port {port} --save '' "
                             "--appendonly no --protected-mode no", shell=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    time.sleep(1)
    elastic = [f"diloco.enabled=true", f"diloco.workers={workers}",
               f"diloco.min_workers={workers}", f"diloco.join=redis://10.77.0.254:{port}",
               "diloco.interface=wan0"]
    runs = [("sync data parallel", 1, 12, ["diloco.outer_lr=1", "diloco.outer_momentum=0",
                                            "diloco.nesterov=false"]),
            ("DiLoCo H 50", 50, 150, []), ("DiLoCo H 200", 200, 400, []),
            ("DiLoCo H 500", 500, 500, [])]
    print("| run | steps | syncs | inner step | sync wall (÷ step) | all-reduce share | "
          "compute utilisation |")
    print("|---|---|---|---|---|---|---|")
    try:
        for name, h, steps, extra in runs:
            run = f"elastic_h{h}"
            subprocess.run(f"rm -rf runs/{run}_*", shell=True, check=True)
            settings = model + elastic + [f"diloco.group={run}_{os.getpid()}",
                                          f"diloco.inner_steps={h}", f"train.steps={steps}"] + extra
            per_worker = [figures(lines) for lines in run_group(build_dir, config, run, workers,
                                                                settings, log_dir)]
            mean = [statistics.mean(f[i] for f in per_worker) for i in range(5)]
            print(f"| {name} | {steps} | {mean[4]:.0f} | {mean[2] * 1e3:.0f} ms | "
                  f"{mean[3]:.2f} s ({mean[3] / mean[2]:.0f}) | {mean[1] * 100:.1f}% | "
                  f"{mean[0] * 100:.1f}% |", flush=True)
    finally:
        redis.terminate()
        subprocess.run("bash scripts/wan.sh down", shell=True, stdout=subprocess.DEVNULL)

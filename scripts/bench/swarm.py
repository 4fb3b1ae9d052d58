"""scripts/bench_swarm.sh: SWARM against the static pipeline on the fortunes corpus, for
docs/PERFORMANCE.md. The model of configs/swarm_fortunes.yaml in 4 stages of one layer, STEPS
steps of 32 sequences (micro-batches of MICRO, default 4: 8 a step):

  pipeline       GPipe, pp 4, one rank a stage (mpirun -np 4)
  pipeline dp 2  GPipe, pp 4 × dp 2: the 8 processes of the swarms below
  swarm 4        one peer a stage, one micro-batch in flight, fixed routing (the pipeline's run)
  swarm 8        two peers a stage (two drivers), LANES micro-batches in flight per driver
                 (default 1: two in flight, a quarter of a step; more in flight than a step's
                 micro-batches makes every stage's gradients a step stale, which costs val_loss)
  swarm 8 int8   the same with swarm.compression int8
  throttled      one stage-2 peer (swarm) or rank (pipeline dp 2: replica 0's stage 2) slowed
                 2x: a floor on each of its requests (swarm) of twice their unthrottled time,
                 from swarm 8's published speeds (the `swarm` lines), or on each of its steps
                 (pipeline) of twice the unthrottled pipeline's median step
  killed         swarm 8 with a random non-driver peer SIGKILLed every KILL_EVERY seconds and a
                 fresh peer started for its stage (which takes the stage's state); the static
                 pipeline cannot lose a rank

Per run: the final val_loss, tokens/s (the global batch's tokens over the median step), the
drivers' boundary bytes per step, and for the killed run the peers killed. Raw lines, then a
table."""
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time

from bench import matrix, metrics

CONFIG = "configs/swarm_fortunes.yaml"
STAGES = "[1,1,1,1]"


MICRO = int(os.environ.get("MICRO", "4"))


def common(steps, work, name):
    return [f"train.steps={steps}", "train.log_every=10", f"train.eval_every={steps}",
            f"train.micro_batch={MICRO}", f"run.dir={work}", f"run.name={name}",
            "checkpoint.every=0", "threads=1"]


def pipeline(build_dir, work, steps, name, dp, throttle_s=0.0):
    """GPipe over 4 stages (× dp): MPMD under mpirun so that only rank 0's stage-2 rank gets the
    step_seconds floor (rank = pp·dp + d here, tp 1)."""
    train = os.path.join(build_dir, "bin", "train")
    args = [train, CONFIG, *matrix.sets(common(steps, work, name) + [
        "swarm.join=", "parallel.pp=4", f"parallel.dp={dp}", f"parallel.pp_layers={STAGES}",
        "parallel.pipeline_schedule=gpipe"])]
    slow = 2 * dp  # stage 2, replica 0
    command = ["mpirun", "--oversubscribe", "-np", str(slow), *args]
    hooks = f"step_seconds={throttle_s}" if throttle_s > 0 else ""
    command += [":", "-np", "1", "-x", f"STRATA_TEST_HOOKS={hooks}", *args]
    command += [":", "-np", str(4 * dp - slow - 1), *args]
    began = time.time()
    with open(os.path.join(work, name + ".log"), "w") as out:
        subprocess.run(command, check=True, stdout=out, stderr=subprocess.STDOUT)
    return {"p": metrics.read(os.path.join(work, name, "metrics.jsonl"))}, time.time() - began


def peer_command(build_dir, work, steps, name, store, stage, overrides):
    return [os.path.join(build_dir, "bin", "train"), CONFIG, *matrix.sets(
        common(steps, work, name) + [f"swarm.join=file://{store}", f"swarm.stages={STAGES}",
                                     f"swarm.stage={stage}", "swarm.timeout=10",
                                     "swarm.request_timeout=10", *overrides])]


def start(build_dir, work, steps, name, store, stage, overrides, hooks=""):
    env = dict(os.environ, STRATA_TEST_HOOKS=hooks)
    log = open(os.path.join(work, name + ".log"), "w")
    process = subprocess.Popen(peer_command(build_dir, work, steps, name, store, stage, overrides),
                               stdout=log, stderr=subprocess.STDOUT, env=env)
    # Serving before the next starts, so that peers take ids in order.
    for _ in range(600):
        with open(os.path.join(work, name + ".log")) as text:
            if " serves stage " in text.read():
                break
        if process.poll() is not None:
            sys.exit(f"peer {name} exited: see {work}/{name}.log")
        time.sleep(0.05)
    return process


def swarm(build_dir, work, steps, name, per_stage, overrides, hooks=None, kill_every=0):
    """A swarm of `per_stage` peers a stage; hooks: {peer name: STRATA_TEST_HOOKS}. Returns the
    first driver's lines, every driver's, and the peers killed."""
    store = os.path.join(work, "store_" + name)
    hooks = hooks or {}
    peers = {}
    began = time.time()
    for stage in (3, 2, 1, 0):
        for i in range(per_stage):
            peer = f"{name}_{stage}{'ab'[i]}"
            peers[peer] = (stage, start(build_dir, work, steps, peer, store, stage, overrides,
                                        hooks.get(peer, "")))
    drivers = [p for p, (stage, _) in peers.items() if stage == 0]
    killed, rng, last_kill, fresh = 0, random.Random(1), time.time(), 0
    while any(peers[d][1].poll() is None for d in drivers):
        time.sleep(0.2)
        if kill_every and time.time() - last_kill > kill_every:
            alive = [p for p, (s, proc) in peers.items() if s > 0 and proc.poll() is None]
            if alive:
                victim = rng.choice(alive)
                stage, proc = peers[victim]
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                killed += 1
                fresh += 1
                replacement = f"{name}_{stage}r{fresh}"
                peers[replacement] = (stage, start(build_dir, work, steps, replacement, store,
                                                   stage, overrides))
            last_kill = time.time()
    for peer, (stage, proc) in peers.items():
        status = proc.wait()
        if status not in (0, -signal.SIGKILL):
            sys.exit(f"peer {peer} failed ({status}): see {work}/{peer}.log")
    wall = time.time() - began
    lines = {d: metrics.read(os.path.join(work, d, "metrics.jsonl")) for d in drivers}
    return lines, wall, killed


def report(name, lines, wall_s, global_batch, seq_len, killed=0):
    """A row: val_loss, tokens/s over the median step (the first driver's, or rank 0's: a
    synchronous job's ranks wait for a slow one outside their step's time, so this figure misses
    a throttled rank), tokens/s over the wall time from the first process's start to the last's
    exit (startup and the final evaluation included), the drivers' boundary bytes per step."""
    first = next(iter(lines.values()))
    steps = metrics.training(first)
    row = {"run": name, "val_loss": metrics.final_val_loss(first),
           "tokens_per_s": global_batch * seq_len / (metrics.median_step_ms(steps) / 1e3),
           "wall_tokens_per_s": len(steps) * global_batch * seq_len / wall_s}
    if "boundary_bytes" in steps[-1]:
        total = sum(metrics.training(l)[-1]["boundary_bytes"] for l in lines.values())
        row["boundary_mib_per_step"] = total / len(steps) / 2**20
    if killed:
        row["killed"] = killed
    return row


def stage_speed(work, name, stage):
    """A peer's samples per second at `stage`, from the last `swarm` line of its servers."""
    speeds = []
    for peer in os.listdir(work):
        path = os.path.join(work, peer, "metrics.jsonl")
        if peer.startswith(f"{name}_{stage}") and os.path.exists(path):
            looks = [l for l in metrics.read(path) if l.get("swarm")]
            if looks:
                last = looks[-1]
                speeds.append(last["stage_samples_per_s"][stage] / last["stage_peers"][stage])
    return statistics.median(speeds)


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    steps = int(os.environ.get("STEPS", "100"))
    lanes = os.environ.get("LANES", "1")
    kill_every = float(os.environ.get("KILL_EVERY", "20"))
    matrix.allow_mpirun_as_root()
    matrix.build(build_dir, ["train", "tokenize"])
    matrix.prepare_fortunes(build_dir)
    print(matrix.header(f"steps {steps} micro_batch {MICRO} lanes {lanes} "
                        f"kill_every {kill_every}"), flush=True)
    B, T = 32, 128
    rows = []
    with matrix.Scratch() as work:
        balanced = ["swarm.routing=balanced", f"swarm.in_flight={lanes}",
                    "swarm.rebalance_every=5"]
        rows.append(report("pipeline pp 4", *pipeline(build_dir, work, steps, "pp4", 1), B, T))
        pp4dp2 = pipeline(build_dir, work, steps, "pp4dp2", 2)
        rows.append(report("pipeline pp 4 dp 2", *pp4dp2, B, T))
        one, wall, _ = swarm(build_dir, work, steps, "s4", 1, ["swarm.routing=fixed"])
        rows.append(report("swarm 4 peers, 1 in flight", one, wall, B, T))
        eight, wall, _ = swarm(build_dir, work, steps, "s8", 2, balanced)
        rows.append(report(f"swarm 8 peers, {lanes} in flight per driver", eight, wall, B, T))
        int8, wall, _ = swarm(build_dir, work, steps, "s8q", 2,
                              balanced + ["swarm.compression=int8"])
        rows.append(report(f"swarm 8 peers, {lanes} in flight per driver, int8", int8, wall, B, T))
        # Twice the unthrottled time: a request (half a micro-batch's forward and backward), and
        # the pipeline's step (its wall time per step, which the ranks' step_ms leave short).
        speed = stage_speed(work, "s8", 2)
        request_s = 2 * (MICRO / speed) / 2
        step_s = 2 * pp4dp2[1] / steps
        print(json.dumps({"stage2_samples_per_s": speed, "request_floor_s": request_s,
                          "step_floor_s": step_s}), flush=True)
        rows.append(report("pipeline pp 4 dp 2, one rank 2x slower",
                           *pipeline(build_dir, work, steps, "pp4dp2t", 2, step_s), B, T))
        slow, wall, _ = swarm(build_dir, work, steps, "s8t", 2, balanced,
                              {"s8t_2a": f"step_seconds={request_s}"})
        rows.append(report("swarm 8 peers, one peer 2x slower", slow, wall, B, T))
        killed_lines, wall, killed = swarm(build_dir, work, steps, "s8k", 2, balanced,
                                           kill_every=kill_every)
        rows.append(report(f"swarm 8 peers, a peer killed every {kill_every:g} s", killed_lines,
                           wall, B, T, killed))
    for row in rows:
        print(json.dumps(row), flush=True)
    print("| run | val_loss | tokens/s (median step) | tokens/s (wall) | boundary MiB/step |")
    print("|---|---|---|---|---|")
    for r in rows:
        mib = f"{r['boundary_mib_per_step']:.2f}" if "boundary_mib_per_step" in r else "-"
        print(f"| {r['run']} | {r['val_loss']:.4f} | {r['tokens_per_s']:.0f} | "
              f"{r['wall_tokens_per_s']:.0f} | {mib} |")
    return 0

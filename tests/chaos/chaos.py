#!/usr/bin/env python3
"""Kill -9 at any moment: a multi-rank training job loses one rank to SIGKILL at a seeded random
moment (or just as a checkpoint is being written), dies, is resumed with `--resume`, and so on
until it completes; its final checkpoint and its whole loss trace must then be bitwise those of an
uninterrupted run (fp32 on the CPU).

For each variant (4 ranks: tp 2 x dp 2; ZeRO-3 over dp 4; two DiLoCo workers of tp 2; ZeRO-1
over dp 4 with AdamW's state streamed from disk, optimizer.offload), one
uninterrupted reference run, then chaos trials until the variant has taken its kills. A kill's
moment is one of
  random      a uniform time into the attempt (start-up, steps, evaluation, checkpoints alike),
  checkpoint  the moment the temporary file of the attempt's 1st, 2nd or 3rd checkpoint
              appears (the write in progress),
and its phase is classified from what the job had done when the signal was sent: start-up (no
step finished since launch), checkpoint write (a temporary checkpoint file exists), or step.
Prints one line per kill and a summary table (markdown); exits 1 if any trial fails to complete
or to match. Standard library only; run by tests/chaos/chaos.sh.
"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = {
    "tp2_dp2": "parallel: {tp: 2, gpus_per_node: 4}\n",
    "zero3": "parallel: {tp: 1, gpus_per_node: 4, zero: {stage: 3}}\n",
    "diloco": (
        "parallel: {tp: 2, gpus_per_node: 2}\n"
        "diloco: {enabled: true, workers: 2, inner_steps: 4, outer_lr: 0.7,"
        " outer_momentum: 0.9}\n"
    ),
    # AdamW's state streamed from a file in chunks of 1024 elements: kills land mid-update.
    "offload_disk": "parallel: {tp: 1, gpus_per_node: 4, zero: {stage: 1}}\n",
}
# Optimizer keys of a variant, beside the common ones ({run_dir}: the variant's run directory).
OPTIMIZER_KEYS = {
    "offload_disk": ", offload: disk, offload_dir: {run_dir}/offload, offload_chunk: 1024",
}


def write_config(path, name, run_dir, data, steps, vocab, variant):
    optimizer = OPTIMIZER_KEYS.get(variant, "").format(run_dir=run_dir)
    path.write_text(
        f"run: {{name: {name}, dir: {run_dir}, seed: 11}}\n"
        f"model: {{n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: {vocab}}}\n"
        f"data: {{train: {data}/train, val: {data}/val}}\n"
        f"optimizer: {{lr: 3.0e-3, warmup_steps: 2{optimizer}}}\n"
        f"train: {{steps: {steps}, global_batch: 8, micro_batch: 2, eval_every: 6,"
        " eval_tokens: 1024, log_every: 1}\n"
        "checkpoint: {every: 2, keep: 2}\n"
        "device: cpu\n"
        "threads: 1\n" + VARIANTS[variant]
    )


def mpirun_command(build, ranks, config, resume):
    command = ["mpirun", "--oversubscribe", "-np", str(ranks), str(build / "bin" / "train"),
               str(config)]
    # Without a checkpoint to resume from, an attempt starts afresh over what the killed one left
    # (its metrics and config): --overwrite.
    return command + (["--resume"] if resume else ["--overwrite"])


def environment():
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
    return env


def rank_processes(mpirun_pid):
    """{rank: pid} of the `train` processes mpirun started (read from their environment)."""
    ranks = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent != mpirun_pid:
                continue
            env = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        for item in env:
            if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks[int(item.split(b"=", 1)[1])] = int(entry.name)
    return ranks


def checkpoint_writes(checkpoints):
    """Names of the temporary files of checkpoints being written now."""
    try:
        return {p.name for p in checkpoints.iterdir()
                if p.name.startswith(".step_") and ".h5.tmp" in p.name}
    except OSError:
        return set()


def writing_checkpoint(checkpoints):
    return bool(checkpoint_writes(checkpoints))


def steps_done(log_path):
    """Step lines printed since this attempt began (the log is per attempt)."""
    try:
        return len(re.findall(r"^step *\d+/", log_path.read_text(), re.MULTILINE))
    except OSError:
        return 0


def trace(metrics):
    """Every training and evaluation line's numbers that must repeat exactly, by step."""
    lines = {}
    for text in metrics.read_text().splitlines():
        record = json.loads(text)
        if "loss" in record:
            lines[("train", record["step"])] = (record["loss"], record["grad_norm"], record["lr"])
        elif "val_loss" in record:
            lines[("eval", record["step"])] = record["val_loss"]
        elif "outer_grad_norm" in record:
            lines[("outer", record["step"])] = (record["outer_grad_norm"], record["worker_loss"])
    return lines


def gone(pid):
    """Whether process `pid` has ended (a zombie, ended but not yet reaped, counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def finish_off(ranks):
    """SIGKILLs the ranks of a killed job that outlive it (mpirun can end while a rank still waits
    in a collective for the dead one, its heartbeat going on) and waits until they are gone, as a
    scheduler ends a failed job: the next attempt then finds the run directory's lock dead."""
    for pid in ranks.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 60
    while not all(gone(pid) for pid in ranks.values()) and time.monotonic() < deadline:
        time.sleep(0.01)


class Attempt:
    """One launch of the job, optionally killed."""

    def __init__(self, args, config, log_path, resume):
        self.ranks = {}  # {rank: pid}, known once kill_one_rank has looked
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            mpirun_command(args.build, 4, config, resume), stdout=self.log,
            stderr=subprocess.STDOUT, env=environment(), start_new_session=True)

    def alive(self):
        return self.process.poll() is None

    def wait(self, timeout):
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait()
        finally:
            self.log.close()


def kill_one_rank(attempt, rng, mode, checkpoints, duration):
    """Waits for the kill moment, SIGKILLs one rank; returns its phase, or None (job ended)."""
    deadline = attempt.started + (rng.uniform(0.2, duration) if mode == "random" else 600)
    # A checkpoint kill hits the 1st, 2nd or 3rd write of the attempt (the first of a fresh run
    # leaves nothing to resume from).
    target, seen = rng.randint(1, 3), set()
    while attempt.alive():
        if mode == "checkpoint":
            seen |= checkpoint_writes(checkpoints)
            if len(seen) >= target and writing_checkpoint(checkpoints):
                break
        if mode == "random" and time.monotonic() >= deadline:
            break
        time.sleep(0.002)
    ranks = rank_processes(attempt.process.pid)
    if not attempt.alive() or not ranks:
        return None
    if writing_checkpoint(checkpoints):
        phase = "checkpoint write"
    elif steps_done(attempt.log_path) == 0:
        phase = "start-up"
    else:
        phase = "step"
    attempt.ranks = ranks
    victim = rng.choice(sorted(ranks))
    try:
        os.kill(ranks[victim], signal.SIGKILL)
    except ProcessLookupError:
        return None
    return phase, victim


def run_variant(args, variant, kills_wanted, rng, data, counts):
    work = args.work / variant
    work.mkdir(parents=True, exist_ok=True)
    run_dir = work / "runs"
    reference = work / "reference.yaml"
    write_config(reference, "reference", run_dir, data, args.steps, args.vocab, variant)
    started = time.monotonic()
    first = Attempt(args, reference, work / "reference.log", False)
    if first.wait(600) != 0:
        sys.exit(f"error: the uninterrupted {variant} run failed (see {work / 'reference.log'})")
    duration = time.monotonic() - started
    reference_final = run_dir / "reference" / "checkpoints" / f"step_{args.steps:08d}.h5"
    reference_trace = trace(run_dir / "reference" / "metrics.jsonl")

    results, kills, trial = [], [], 0
    while len(kills) < kills_wanted:
        trial += 1
        name = f"chaos_{trial}"
        config = work / f"{name}.yaml"
        write_config(config, name, run_dir, data, args.steps, args.vocab, variant)
        checkpoints = run_dir / name / "checkpoints"
        attempts, outcome, resumes = 0, None, []
        while outcome is None:
            attempts += 1
            resume = checkpoints.is_dir() and any(checkpoints.glob("step_*.h5"))
            attempt = Attempt(args, config, work / f"{name}.{attempts}.log", resume)
            killed = None
            if len(kills) < kills_wanted:
                mode = "checkpoint" if rng.random() < args.checkpoint_share else "random"
                killed = kill_one_rank(attempt, rng, mode, checkpoints, duration)
            status = attempt.wait(600)
            finish_off(attempt.ranks)
            log = attempt.log_path.read_text()
            resumed = re.search(r"^resumed from \S+ at step (\d+)", log, re.MULTILINE)
            if resumed:
                resumes.append(int(resumed.group(1)))
            counts["removed"] += log.count("warning: removed '")
            counts["skipped"] += log.count("warning: skipping checkpoint")
            if killed:
                phase, victim = killed
                kills.append(phase)
                print(f"{variant} trial {trial} attempt {attempts}: killed rank {victim} during "
                      f"{phase}; job exited {status}", flush=True)
                continue
            if status != 0:
                outcome = f"attempt {attempts} failed with status {status}"
                break
            final = checkpoints / f"step_{args.steps:08d}.h5"
            diff = subprocess.run([str(args.build / "bin" / "ckpt"), "diff", str(reference_final),
                                   str(final)], capture_output=True, text=True)
            same_trace = trace(run_dir / name / "metrics.jsonl") == reference_trace
            if diff.returncode == 0 and same_trace:
                outcome = "bitwise equal"
            else:
                outcome = ("final checkpoint differs: " + diff.stdout.strip()[-300:]
                           if diff.returncode != 0 else "loss trace differs")
        results.append((trial, attempts, outcome, len(resumes)))
        print(f"{variant} trial {trial}: completed after {attempts} attempt(s), resumed at steps "
              f"{resumes}: {outcome}", flush=True)
    return results, kills


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", type=Path, default=Path("build"))
    parser.add_argument("--work", type=Path, default=Path("runs/chaos"))
    parser.add_argument("--data", type=Path, required=True,
                        help="token shards (a directory with train/ and val/)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--kills", type=int, default=2, help="kills per variant")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=64, help="model.vocab_size (>= the data's)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--checkpoint-share", type=float, default=0.4,
                        help="share of kills aimed at a checkpoint write")
    args = parser.parse_args()
    args.build = args.build.resolve()
    args.work = args.work.resolve()
    rng = random.Random(args.seed)
    failures, table = 0, []
    counts = {"removed": 0, "skipped": 0}  # resume's warnings: leftover writes, damaged files
    started = time.monotonic()
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            sys.exit(f"error: unknown variant '{variant}' (known: {', '.join(VARIANTS)})")
        results, kills = run_variant(args, variant, args.kills, rng, args.data.resolve(), counts)
        bad = [r for r in results if r[2] != "bitwise equal"]
        failures += len(bad)
        phases = {p: kills.count(p) for p in ("start-up", "step", "checkpoint write")}
        resumes = sum(r[3] for r in results)
        table.append((variant, len(results), len(kills), phases, resumes, len(results) - len(bad)))
    print("\n| variant | trials | kills | start-up | step | checkpoint write | resumes |"
          " bitwise equal |")
    print("|---|---|---|---|---|---|---|---|")
    for variant, trials, kills, phases, resumes, good in table:
        print(f"| {variant} | {trials} | {kills} | {phases['start-up']} | {phases['step']} | "
              f"{phases['checkpoint write']} | {resumes} | {good}/{trials} |")
    total = sum(row[2] for row in table)
    print(f"\nchaos: {total} kills, {sum(row[1] for row in table)} trials, "
          f"{sum(row[4] for row in table)} resumes, {failures} failed")
    print(f"resumes removed {counts['removed']} unfinished checkpoint write(s) and skipped "
          f"{counts['skipped']} damaged checkpoint(s); {time.monotonic() - started:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""scripts/bench_precision.sh: the cost of emulated mixed precision and of activation
recomputation on the CPU: `bench train --config CONFIG` under precision.compute fp32/bf16/fp16 ×
recompute none/selective/full. Each round runs the nine once (reversed every other round), each a
fresh process reporting the median step of STEPS; the best round of each (highest tokens/s) is
kept, so a round disturbed by another job does not decide the result. Raw JSON lines, then a
table."""
import json
import os
import subprocess

from bench import matrix

COMPUTES = ("fp32", "bf16", "fp16")
RECOMPUTES = ("none", "selective", "full")


def best_runs(results):
    """{(compute, recompute): the result with the highest tokens/s}."""
    best = {}
    for r in results:
        key = (r["compute"], r["recompute"])
        if key not in best or r["tokens_per_s"] > best[key]["tokens_per_s"]:
            best[key] = r
    return best


def table(best):
    base = best[("fp32", "none")]
    lines = ["\n| compute | recompute | step ms | tokens/s | vs fp32 none | activation MiB"
             " | per layer MiB | peak RSS MiB | MFU |",
             "|---|---|---|---|---|---|---|---|---|"]
    for compute in COMPUTES:
        for recompute in RECOMPUTES:
            r = best[(compute, recompute)]
            lines.append(
                f"| {compute} | {recompute} | {r['step_ms']:.1f} | {r['tokens_per_s']:.0f} | "
                f"{r['step_ms'] / base['step_ms']:.2f}× | {r['activation_mib']:.1f} | "
                f"{r['activation_mib_per_layer']:.2f} | {r['peak_rss_mib']:.0f} | {r['mfu']:.0%} |")
    return lines


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    config = os.environ.get("CONFIG", "configs/fortunes.yaml")
    rounds = int(os.environ.get("ROUNDS", "3"))
    steps = os.environ.get("STEPS", "20")
    threads = os.environ.get("THREADS", "2")
    matrix.build(build_dir, ["bench"])
    print(f"# {matrix.stamp()} config {config} cpu '{matrix.cpu_model()}'"
          f" nproc {len(os.sched_getaffinity(0))} threads {threads}", flush=True)
    combinations = [(c, r) for c in COMPUTES for r in RECOMPUTES]
    env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
    results = []
    for round_ in range(1, rounds + 1):
        # Reversed every other round, so no combination always runs first or last.
        for compute, recompute in combinations if round_ % 2 else combinations[::-1]:
            text = subprocess.run(
                [os.path.join(build_dir, "bin", "bench"), "train", "--config", config, "--set",
                 f"precision.compute={compute}", "--set", f"recompute={recompute}", "--steps",
                 steps], env=env, check=True, capture_output=True, text=True).stdout
            print(text, end="", flush=True)
            results += [json.loads(line) for line in text.splitlines() if line.strip()]
    print("\n".join(table(best_runs(results))))

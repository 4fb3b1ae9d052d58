"""scripts/bench_cpu.sh: one training step of Strata against PyTorch 2.x on the CPU, then the
GEMM library's sgemm.

Models: small and 124m by flags (GPT-2 shapes), fortunes and llama by a config that both sides
read (`bench train --config`, `bench_torch.py --config`): configs/fortunes.yaml's GPT-2 and
configs/llama_fortunes.yaml's Llama-style block (RMSNorm, SwiGLU, RoPE, grouped-query attention,
no biases) of the same size and batch.

For every model and thread count, ROUNDS alternating rounds of `bench train` (OMP_NUM_THREADS
only, as a user runs it) and tools/bench_torch.py (eager with SDPA, then torch.compile), each a
fresh process reporting the median step of STEPS; the best round of each side is kept. Then
sgemm on the small model's GEMM shapes and on a large square one (the machine's peak). Raw lines
(kind, threads, JSON) first, then a summary."""
import json
import os
import subprocess
import sys

from bench import matrix

MODELS = {"small": [],  # the defaults of both benchmarks: 4 layers, d 256, seq 256, vocab 2048
          "124m": ["--n-layer", "12", "--n-head", "12", "--d-model", "768", "--seq-len", "1024",
                   "--vocab", "50304", "--micro-batch", "1"],
          # 4 layers, d 192, seq 128, vocab 4096, micro-batch 8, fp32: 2.56 M parameters each.
          "fortunes": ["--config", "configs/fortunes.yaml"],
          "llama": ["--config", "configs/llama_fortunes.yaml"]}
# (m, n, k): QKV, MLP fc, MLP proj, attention proj, LM head forward, then the square peak.
SHAPES = [(2048, 768, 256), (2048, 1024, 256), (2048, 256, 1024), (2048, 256, 256),
          (2048, 2048, 256), (2048, 2048, 2048)]


def summary(rows):
    """The report of the raw rows (kind, threads, result): best training step per model, thread
    count and side, its ratios and its share of the sgemm peak; failures; the sgemm figures."""
    runs = {}
    for kind, threads, result in rows:
        runs.setdefault((kind, int(threads)), []).append(result)

    def best(kind, threads, compiled=None):
        candidates = [r for r in runs.get((kind, threads), []) if "error" not in r and
                      (compiled is None or r.get("compile") == compiled)]
        return max(candidates, key=lambda r: r["tokens_per_s"]) if candidates else None

    thread_counts = sorted({t for kind, t in runs if kind == "sgemm"})
    peak = {t: max(r["gflops"] for r in runs[("sgemm", t)] if r["m"] == r["n"] == r["k"])
            for t in thread_counts}
    models = sorted({kind.split()[1] for kind, t in runs if kind.startswith("strata ")},
                    key=lambda m: list(MODELS).index(m) if m in MODELS else len(MODELS))
    out = ["\n== training step, best of rounds (each round: median step) ==",
           f"{'model':>8} {'threads':>7} {'strata tok/s':>12} {'eager tok/s':>11} {'compiled':>9} "
           f"{'vs eager':>8} {'vs comp.':>8} {'strata RSS':>10} {'GFLOP/s':>7} {'of sgemm':>8}"]
    for m in models:
        for t in thread_counts:
            s = best(f"strata {m}", t)
            e, c = best(f"torch {m}", t, False), best(f"torch {m}", t, True)
            if s is None:
                continue

            def ratio(other):
                return f"{s['tokens_per_s'] / other['tokens_per_s']:.2f}" if other else "-"

            def rate(other):
                return f"{other['tokens_per_s']:.0f}" if other else "failed"
            out.append(f"{m:>8} {t:>7} {s['tokens_per_s']:>12.0f} {rate(e):>11} {rate(c):>9} "
                       f"{ratio(e):>8} {ratio(c):>8} {s['peak_rss_mib']:>10.0f} {s['gflops']:>7.1f} "
                       f"{s['gflops'] / peak[t]:>8.0%}")
    for kind, t in sorted(runs):
        for r in runs[(kind, t)]:
            if "error" in r:
                out.append(f"{kind} threads {t} compile={r.get('compile')}: {r['error']}")
    out.append("\n== sgemm GFLOP/s (m, n, k) ==")
    for t in thread_counts:
        cells = ", ".join(f"({r['m']},{r['n']},{r['k']}) {r['gflops']:.1f}"
                          for r in runs[("sgemm", t)])
        out.append(f"threads {t}: {cells}")
    return out


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    rounds = int(os.environ.get("ROUNDS", "3"))
    steps = os.environ.get("STEPS", "20")
    threads_list = os.environ.get("THREADS", "1 2").split()
    models = os.environ.get("MODELS", "small fortunes llama 124m").split()
    steps_124m = os.environ.get("STEPS_124M", "5")
    python = os.environ.get("PYTHON", ".venv-test/bin/python")  # scripts/setup_python.sh
    if not os.access(python, os.X_OK):
        print(f"error: {python} is missing: run scripts/setup_python.sh", file=sys.stderr)
        return 1
    for model in models:
        if model not in MODELS:
            print(f"error: unknown model '{model}' ({', '.join(MODELS)})", file=sys.stderr)
            return 1
    matrix.build(build_dir, ["bench"])
    bench = os.path.join(build_dir, "bin", "bench")
    rows = []

    def emit(kind, threads, text):  # one tagged line into the log and on stdout
        print(f"{kind}\t{threads}\t{text}", flush=True)
        rows.append((kind, threads, json.loads(text)))

    def run(args, threads=None):  # threads None: the environment's own
        env = dict(os.environ, **({"OMP_NUM_THREADS": threads} if threads else {}))
        return subprocess.run(args, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    def model_steps(model):
        return steps_124m if model == "124m" else steps

    def strata(model, threads):
        emit(f"strata {model}", threads, run([bench, "train", *MODELS[model], "--steps",
                                              model_steps(model), "--warmup", "1"], threads))

    def torch(model, threads):  # eager (SDPA) and compiled, one line each
        for line in run([python, "tools/bench_torch.py", *MODELS[model], "--threads", threads,
                         "--steps", model_steps(model), "--warmup", "2", "--sdpa", "--modes",
                         "eager,compile"], threads).splitlines():
            emit(f"torch {model}", threads, line)

    version = run([python, "-c", "import torch; print(torch.__version__)"])
    blas = json.loads(run([bench, "sgemm", "--m", "16", "--n", "16", "--k", "16", "--repeats",
                           "1"]))
    print(f"# {matrix.stamp()} cpu '{matrix.cpu_model()}' nproc {len(os.sched_getaffinity(0))}"
          f" torch {version} {blas['blas']} {blas['blas_version']} {blas['blas_kernels']}")
    print(f"# load before: {matrix.load()}", flush=True)
    for model in models:
        for round_ in range(1, rounds + 1):
            for threads in threads_list:
                # Alternate which side goes first so neither always runs on a warmer machine.
                sides = (strata, torch) if round_ % 2 else (torch, strata)
                for side in sides:
                    side(model, threads)
    for threads in threads_list:
        for m, n, k in SHAPES:
            emit("sgemm", threads, run([bench, "sgemm", "--m", str(m), "--n", str(n), "--k",
                                        str(k), "--repeats", "10"], threads))
    print(f"# load after: {matrix.load()}")
    print("\n".join(summary(rows)))

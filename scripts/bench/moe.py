"""scripts/bench_moe.sh: a dense GPT against mixtures of experts on the fortunes corpus, for
docs/PERFORMANCE.md. Every variant trains CONFIG for STEPS steps on RANKS ranks (data parallel):
the dense model, then E = EXPERTS experts in every second block with top-2 and with top-1 routing
(top-1 has the dense model's active parameters; top-2 runs two expert MLPs per token in its MoE
blocks), each at ep 1, 2 and 4. Per run: parameters (total and active per token), the final
val_loss, the median tokens/s, rank 0's model state and activation bytes, its peak RSS, and the
all-to-all bytes rank 0 sent per step (median over the steps, from comm_bytes). Raw lines, then
a table."""
import os
import re
import statistics
import subprocess

from bench import matrix, metrics


def variants(experts, ranks):
    """(label, experts, top_k, overrides): the dense model, then top-2 and top-1 at every ep."""
    dense = [("dense", 0, 0, [])]
    moe = []
    for top_k in (2, 1):
        for ep in (e for e in (1, 2, 4) if ranks % e == 0 and experts % e == 0):
            moe.append((f"E{experts} top-{top_k} ep {ep}", experts, top_k,
                        ["model.moe.experts=" + str(experts), "model.moe.every=2",
                         f"model.moe.top_k={top_k}", f"parallel.ep={ep}"]))
    return dense + moe


def parameters(text, experts, top_k):
    """(total, active per token) from the run's startup line: an MoE block (every second of the
    n_layer) uses its router and top_k of its experts, each an MLP of 8C² + 5C parameters
    (GptShape::active_params_excluding_positions, here with wpe counted in both)."""
    total = int(re.search(r"model: (\d+) parameters", text).group(1))
    layers, C = map(int, re.search(r"\((\d+) layers, d_model (\d+)", text).groups())
    moe_blocks = layers // 2 if experts else 0
    return total, total - moe_blocks * (experts - top_k) * (8 * C * C + 5 * C)


def run(build_dir, config, ranks, steps, name, overrides, run_dir, experts, top_k):
    command = ["mpirun", "--oversubscribe", "-np", str(ranks),
               os.path.join(build_dir, "bin", "train"), config,
               "--set", f"run.dir={run_dir}", "--set", f"run.name={name}",
               "--set", f"train.steps={steps}", "--set", "train.log_every=1",
               "--set", f"train.eval_every={steps}", "--set", "checkpoint.every=0"]
    for o in overrides:
        command += ["--set", o]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    text = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    lines = metrics.read(os.path.join(run_dir, name, "metrics.jsonl"))
    steps_ = metrics.training(lines)
    a2a = [metrics.bytes_by_kind(s["comm_bytes"]).get("all_to_all", 0) for s in steps_[1:]]
    memory = steps_[-1]["memory_bytes"]
    return {
        "name": name,
        "parameters": parameters(text, experts, top_k),
        "val_loss": metrics.final_val_loss(lines),
        "tokens_per_s": statistics.median(s["tokens_per_s"] for s in steps_[1:]),
        "model_state_mib": metrics.model_state(memory) / 2**20,
        "activation_mib": memory["activations"] / 2**20,
        "peak_rss_mib": max(s["peak_rss_mib"] for s in steps_),
        "all_to_all_kib": statistics.median(a2a) / 1024 if a2a else 0.0,
    }


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    config = os.environ.get("CONFIG", "configs/fortunes.yaml")
    steps = int(os.environ.get("STEPS", "200"))
    ranks = int(os.environ.get("RANKS", "4"))
    experts = int(os.environ.get("EXPERTS", "8"))
    run_dir = os.environ.get("RUN_DIR", "/tmp/bench_moe")
    matrix.build(build_dir, ["train"])
    print(f"# {matrix.stamp()} config {config} cpu '{matrix.cpu_model()}'"
          f" nproc {len(os.sched_getaffinity(0))} ranks {ranks} steps {steps}", flush=True)
    subprocess.run(["rm", "-rf", run_dir], check=True)
    results = []
    for label, moe_experts, top_k, overrides in variants(experts, ranks):
        name = re.sub(r"[^A-Za-z0-9]+", "_", label)
        r = run(build_dir, config, ranks, steps, name, overrides, run_dir, moe_experts, top_k)
        r["label"] = label
        print(r, flush=True)
        results.append(r)
    dense = results[0]
    print("\n| model | parameters (active) | val_loss | tokens/s | vs dense | model state MiB (rank 0)"
          " | activations MiB | peak RSS MiB | all-to-all KiB/step (rank 0) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        total, active = r["parameters"]
        print(f"| {r['label']} | {total / 1e6:.2f} M ({active / 1e6:.2f} M) | {r['val_loss']:.4f} | "
              f"{r['tokens_per_s']:.0f} | {r['tokens_per_s'] / dense['tokens_per_s']:.2f}× | "
              f"{r['model_state_mib']:.1f} | {r['activation_mib']:.1f} | "
              f"{r['peak_rss_mib']:.0f} | {r['all_to_all_kib']:.0f} |")

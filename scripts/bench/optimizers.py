"""scripts/bench_optimizers.sh: the optimizers side by side (optimizer.name).

Memory: a GPT-2 124M-shaped model (T 512, micro-batch 1) on DP data-parallel ranks for STEPS
steps under each optimizer (and with optimizer.offload host or disk), at ZeRO stage 0 and
1: rank 0's optimizer state in memory (its memory account, which the planner predicts byte for
byte) and peak RSS, and the median step time.
Quality (QUALITY=1): the demo model (configs/fortunes.yaml) for 400 steps on 2 ranks, each
optimizer at each learning rate of its grid (QUALITY_VALUES: only those values of the grids);
val_loss per run, the best per optimizer marked. MEMORY=0 skips the memory table."""
import os

from bench import matrix, metrics

GPT2 = ["model.n_layer=12", "model.d_model=768", "model.n_head=12", "model.seq_len=512",
        "model.vocab_size=50304"]
# An entry is optimizer.name, or name+offload (optimizer.offload host or disk: the optimizer's
# per-element state in an arena of its own, or streamed from a file in the scratch directory).
OPTIMIZERS = os.environ.get(
    "OPTIMIZERS", "adamw adamw+host adamw+disk adafactor adafactor+disk adamw8bit adamw8bit+disk"
    " muon muon+disk").split()
# Each optimizer's learning-rate grid for the quality runs: its step-size key and values, doubling
# (a grid whose best value is at its top edge was extended until it was not).
GRIDS = {
    "adamw": ("optimizer.lr", ["1.0e-3", "2.0e-3", "4.0e-3", "8.0e-3"]),
    "adafactor": ("optimizer.lr", ["1.0e-3", "2.0e-3", "4.0e-3", "8.0e-3"]),
    "adamw8bit": ("optimizer.lr", ["1.0e-3", "2.0e-3", "4.0e-3", "8.0e-3"]),
    "muon": ("optimizer.muon.lr", ["0.005", "0.01", "0.02", "0.04", "0.08"]),
}


def memory(build_dir, work, dp, steps):
    print("| optimizer | ZeRO | optimizer state MiB (rank 0) | vs AdamW | peak RSS MiB | step ms |")
    print("|---|---|---|---|---|---|", flush=True)
    for stage in (0, 1):
        adamw = None
        for entry in OPTIMIZERS:
            name, _, offload = entry.partition("+")
            run = f"memory_{name}_{offload or 'none'}_z{stage}"
            lines = metrics.read(matrix.train(build_dir, dp, GPT2 + [
                f"optimizer.name={name}", f"optimizer.offload={offload or 'none'}",
                f"optimizer.offload_dir={os.path.join(work, 'offload')}",
                f"parallel.zero.stage={stage}", f"train.steps={steps}",
                "train.micro_batch=1", f"train.global_batch={dp}", "train.eval_every=0",
                "train.eval_tokens=513", "train.log_every=1", "checkpoint.every=0"], run, work))
            train = metrics.training(lines)
            state = train[-1]["memory_bytes"]["optimizer_state"]
            adamw = adamw or state
            print(f"| {entry} | {stage} | {state / 2**20:.1f} | {state / adamw:.3f} |"
                  f" {lines[-1]['peak_rss_mib']:.0f} | {metrics.median_step_ms(train):.0f} |",
                  flush=True)


def quality(build_dir, work):
    print("| optimizer | step size | val_loss after 400 steps |")
    print("|---|---|---|", flush=True)
    only = os.environ.get("QUALITY_VALUES", "").split()
    for name in [entry for entry in OPTIMIZERS if "+" not in entry]:
        key, values = GRIDS[name]
        values = [v for v in values if v in only] if only else values
        results = []
        for value in values:
            run = f"quality_{name}_{value}"
            lines = metrics.read(matrix.train(build_dir, 2, [
                f"optimizer.name={name}", f"{key}={value}", "train.eval_every=0",
                "checkpoint.every=0"], run, work))
            results.append((metrics.last_with(lines, "val_loss")["val_loss"], value))
        best = min(results)
        for val, value in results:
            mark = " (best)" if (val, value) == best else ""
            print(f"| {name} | {key}={value} | {val:.4f}{mark} |", flush=True)


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    dp = int(os.environ.get("DP", "2"))
    steps = int(os.environ.get("STEPS", "3"))
    matrix.allow_mpirun_as_root()
    matrix.build(build_dir, ["train", "tokenize"])
    matrix.prepare_fortunes(build_dir)
    with matrix.Scratch() as work:
        print(matrix.header(f"dp {dp} steps {steps}"), flush=True)
        if os.environ.get("MEMORY", "1") == "1":
            memory(build_dir, work, dp, steps)
        if os.environ.get("QUALITY", "0") == "1":
            quality(build_dir, work)

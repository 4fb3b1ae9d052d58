"""scripts/bench_fp8.sh: FP8 training's quality on the CPU's exact emulation (precision.fp8).

The demo model (configs/fortunes.yaml, 4 layers, d_model 192) for STEPS steps on 2 ranks in bf16,
then with every block GEMM in FP8 (fp8_min_size 0: its GEMMs are below the default's 1024) under
each recipe of RECIPES (an entry is precision.fp8, or fp8+format for precision.fp8_format):
val_loss at the end against bf16's (the issue's bar: within 1 %), the median step time and its
ratio to bf16's (the emulation's cost on the CPU, not a speed: the GEMMs stay fp32 sgemm)."""
import os

from bench import matrix, metrics

RECIPES = os.environ.get("RECIPES", "tensorwise rowwise delayed tensorwise+e4m3").split()


def row(name, lines, reference):
    """One table row: the recipe, its final val_loss, that against bf16's, its median step."""
    val = metrics.final_val_loss(lines)
    step = metrics.median_step_ms(metrics.training(lines))
    if reference is None:
        return f"| {name} | {val:.4f} | 1.0000 | {step:.0f} | 1.00× |", (val, step)
    ref_val, ref_step = reference
    return (f"| {name} | {val:.4f} | {val / ref_val:.4f} | {step:.0f} | {step / ref_step:.2f}× |",
            None)


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    steps = int(os.environ.get("STEPS", "400"))
    matrix.allow_mpirun_as_root()
    matrix.build(build_dir, ["train", "tokenize"])
    matrix.prepare_fortunes(build_dir)
    print(matrix.header(f"steps {steps} recipes {' '.join(RECIPES)}"))
    common = ["precision.compute=bf16", "precision.fp8_min_size=0", f"train.steps={steps}",
              "checkpoint.every=0", "train.log_every=10"]
    print("| precision | val_loss | vs bf16 | step ms | vs bf16 |")
    print("|---|---|---|---|---|", flush=True)
    with matrix.Scratch() as work:
        lines = metrics.read(matrix.train(build_dir, 2, common + ["precision.fp8=none"], "bf16",
                                          work))
        text, reference = row("bf16", lines, None)
        print(text, flush=True)
        for entry in RECIPES:
            recipe, _, formats = entry.partition("+")
            overrides = common + [f"precision.fp8={recipe}",
                                  f"precision.fp8_format={formats or 'hybrid'}"]
            lines = metrics.read(matrix.train(build_dir, 2, overrides, f"fp8_{recipe}_{formats}",
                                              work))
            name = f"fp8 {recipe} ({formats or 'hybrid'})"
            print(row(name, lines, reference)[0], flush=True)
    return 0

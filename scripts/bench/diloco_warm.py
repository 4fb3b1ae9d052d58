"""scripts/bench_diloco_warm.sh: DiLoCo from a warm start against data parallelism at equal
compute, in the regime of the DiLoCo paper (workers that start from a trained model and run many
outer steps).

The corpus is Python 3.11's documentation (Debian's python3.11-doc: the reStructuredText sources
of the tutorial, the library and language references, the HOWTOs and the FAQ, about 11 MB of
English prose and code), tokenized once into data/pydocs with a vocabulary of 4096. The model is
as small as the tests' (2 layers, d_model 64, 4 heads, T 64). A data-parallel warm-up of WARM
steps on WORKERS ranks (global batch WORKERS·BATCH sequences) writes a checkpoint; every run then
starts from its weights (`train --init`, the optimizer and schedule fresh) for STEPS more steps:
data parallelism on WORKERS ranks at that global batch, and DiLoCo with WORKERS workers of one
rank and BATCH sequences each, so every run computes the same tokens. One table row per run:
final val_loss, its gap to data parallelism, the bytes across workers (data parallelism: across
nodes, every rank a node of its own) and how many times fewer."""
import glob
import os
import subprocess

from bench import matrix, metrics
from bench.diloco import table

DOCS = "/usr/share/doc/python3.11/html/_sources"
CORPUS = "data/pydocs"


def prepare_corpus(build_dir):
    """data/pydocs, tokenized unless it is there (python3.11-doc installed when missing)."""
    if os.path.exists(os.path.join(CORPUS, "tokenizer.model")):
        return
    if not os.path.isdir(DOCS):
        subprocess.run(["bash", "scripts/setup.sh", "python3.11-doc"], check=True)
    sources = sorted(glob.glob(os.path.join(DOCS, "**", "*.txt"), recursive=True))
    subprocess.run([os.path.join(build_dir, "bin", "tokenize"), "--input", *sources,
                    "--out", CORPUS, "--vocab-size", "4096", "--val-fraction", "0.02",
                    "--threads", "2"], check=True, stdout=subprocess.DEVNULL)


def variants(steps):
    """(name, settings) in table order. H spans STEPS/150 to STEPS/30 (10 to 50 at 1500 steps, 30
    or more outer steps each); "tuned": what PERFORMANCE.md found closes most of the gap."""
    small, mid, large = steps // 150, steps // 60, steps // 30
    h = "diloco.inner_steps="
    tuned = "diloco.outer_momentum=0.5 optimizer.lr=4.0e-3 optimizer.min_lr=4.0e-4"
    return [
        ("baseline", ""),
        ("baseline_lr2", "optimizer.lr=4.0e-3 optimizer.min_lr=4.0e-4"),
        ("baseline_lr3", "optimizer.lr=6.0e-3 optimizer.min_lr=6.0e-4"),
        ("baseline_lr4", "optimizer.lr=8.0e-3 optimizer.min_lr=8.0e-4"),
        ("baseline_lr6", "optimizer.lr=1.2e-2 optimizer.min_lr=1.2e-3"),
        (f"h{small}", f"{h}{small}"),
        (f"h{mid}", f"{h}{mid}"),
        (f"h{large}", f"{h}{large}"),
        (f"h{large}_int8", f"{h}{large} diloco.compression=int8"),
        (f"h{large}_int4", f"{h}{large} diloco.compression=int4 diloco.error_feedback=true"),
        (f"h{large}_lr2", f"{h}{large} optimizer.lr=4.0e-3 optimizer.min_lr=4.0e-4"),
        (f"h{large}_lr3", f"{h}{large} optimizer.lr=6.0e-3 optimizer.min_lr=6.0e-4"),
        (f"h{large}_lr4", f"{h}{large} optimizer.lr=8.0e-3 optimizer.min_lr=8.0e-4"),
        (f"h{large}_lr6", f"{h}{large} optimizer.lr=1.2e-2 optimizer.min_lr=1.2e-3"),
        (f"h{large}_lr2_outer1", f"{h}{large} optimizer.lr=4.0e-3 optimizer.min_lr=4.0e-4 "
                                 "diloco.outer_lr=1.0"),
        (f"h{large}_int4_lr2", f"{h}{large} diloco.compression=int4 diloco.error_feedback=true "
                               "optimizer.lr=4.0e-3 optimizer.min_lr=4.0e-4"),
        (f"h{large}_tuned", f"{h}{large} {tuned}"),
        (f"h{large}_int8_tuned", f"{h}{large} diloco.compression=int8 {tuned}"),
    ]


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    warm = int(os.environ.get("WARM", "1000"))
    steps = int(os.environ.get("STEPS", "1500"))
    batch = int(os.environ.get("BATCH", "8"))
    workers = int(os.environ.get("WORKERS", "4"))
    chosen = os.environ.get("VARIANTS", "all").split()
    matrix.allow_mpirun_as_root()
    matrix.build(build_dir, ["train", "tokenize"])
    prepare_corpus(build_dir)
    model = ["model.n_layer=2", "model.n_head=4", "model.d_model=64", "model.seq_len=64",
             "model.vocab_size=4096", f"data.train={CORPUS}/train", f"data.val={CORPUS}/val",
             f"data.tokenizer={CORPUS}/tokenizer.model", f"train.micro_batch={batch}",
             "train.eval_tokens=65536", "train.log_every=100", "parallel.gpus_per_node=1"]
    with matrix.Scratch() as work:
        print(matrix.header(f"warm-up {warm} steps, then {steps} steps; workers {workers}, "
                            f"batch {batch} per worker, corpus {CORPUS}"))
        matrix.train(build_dir, workers,
                     model + [f"train.steps={warm}", f"train.global_batch={workers * batch}",
                              "train.eval_every=0", f"checkpoint.every={warm}"], "warm", work)
        start = os.path.join(work, "warm", "checkpoints", f"step_{warm:08d}.h5")
        warm_lines = metrics.read(os.path.join(work, "warm", "metrics.jsonl"))
        print(f"warm-up: val_loss {metrics.last_with(warm_lines, 'val_loss')['val_loss']:.4f}")
        common = model + [f"train.steps={steps}", "train.eval_every=0", "checkpoint.every=0"]
        table(build_dir, work, workers, batch, common, variants(steps), chosen,
              extra=["--init", start])

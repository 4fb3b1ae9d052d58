"""scripts/bench_diloco_warm.sh: DiLoCo from a warm start against data parallelism at equal
compute, in the regime of the DiLoCo paper (workers that start from a trained model and run many
outer steps).

The corpus is Python 3.11's documentation (Debian's python3.11-doc: the reStructuredText sources
of the tutorial, the library and language references, the HOWTOs and the FAQ, about 11 MB of
English prose and code), tokenized once into data/pydocs with a vocabulary of 4096. The model is
as small as the tests' (2 layers, d_model 64, 4 heads, T 64). A data-parallel warm-up of WARM
steps on WORKERS ranks of WARM_BATCH sequences each (peak lr WARM_LR) writes a checkpoint; every
run then starts from its weights (`train --init`, the optimizer and schedule fresh) for STEPS
more steps: data parallelism on WORKERS ranks at a global batch of WORKERS·BATCH sequences, and
DiLoCo with WORKERS workers of one rank and BATCH sequences each, so every run computes the same
tokens. One table row per run: final val_loss, its gap to the best data-parallel run of the same
inner optimizer and to the best data-parallel run of all, the bytes across workers (data
parallelism: across nodes, every rank a node of its own) and how many times fewer."""
import glob
import os
import subprocess

from bench import matrix, metrics
from bench.diloco import summary, train_variant

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


def lr(peak):
    """A peak learning rate and its cosine's floor (a tenth)."""
    return f"optimizer.lr={peak} optimizer.min_lr={peak / 10:.1e}"


def variants(h):
    """(name, settings) in table order. Names starting "baseline" are data-parallel: AdamW over an
    lr grid around its best (its best decides the gap) and Muon. The DiLoCo rows, AdamW inside:
    the paper's outer settings (lr 0.7, Nesterov momentum 0.9), federated averaging (outer lr 1,
    no momentum), outer lr 1 with momentum 0.5, the paper's settings under diloco.outer_schedule
    inner, and that with H halved and doubled; then Muon inside (MuLoCo) the same way, at the inner
    lr of AdamW's rows and at data parallelism's (the best, with int4 and error feedback too)."""
    adamw = lr(8.0e-3)
    muon = f"optimizer.name=muon optimizer.muon.lr=0.02 {lr(8.0e-3)}"
    muon_lr2 = f"optimizer.name=muon optimizer.muon.lr=0.02 {lr(1.6e-2)}"
    fedavg = f"{lr(1.2e-2)} diloco.outer_lr=1.0 diloco.outer_momentum=0"
    half = "diloco.outer_lr=1.0 diloco.outer_momentum=0.5"
    inner = "diloco.outer_schedule=inner"
    int4 = "diloco.compression=int4 diloco.error_feedback=true"

    def every(steps):
        return f"diloco.inner_steps={steps}"
    return [
        ("baseline_lr1.2e-2", lr(1.2e-2)),
        ("baseline_lr1.6e-2", lr(1.6e-2)),
        ("baseline_lr2.4e-2", lr(2.4e-2)),
        ("baseline_muon", muon_lr2),
        (f"h{h}_paper", f"{every(h)} {adamw}"),
        (f"h{h}_fedavg", f"{every(h)} {fedavg}"),
        (f"h{h}_m0.5", f"{every(h)} {lr(1.2e-2)} {half}"),
        (f"h{h}_inner", f"{every(h)} {adamw} {inner}"),
        (f"h{h // 2}_inner", f"{every(h // 2)} {adamw} {inner}"),
        (f"h{2 * h}_inner", f"{every(2 * h)} {adamw} {inner}"),
        (f"h{h}_muon_paper", f"{every(h)} {muon}"),
        (f"h{h}_muon_m0.5", f"{every(h)} {muon} {half}"),
        (f"h{h}_muon_inner", f"{every(h)} {muon} {inner}"),
        (f"h{h // 2}_muon_inner", f"{every(h // 2)} {muon} {inner}"),
        (f"h{2 * h}_muon_inner", f"{every(2 * h)} {muon} {inner}"),
        (f"h{h}_muon_lr1.6e-2_inner", f"{every(h)} {muon_lr2} {inner}"),
        (f"h{h}_muon_lr1.6e-2_inner_int4", f"{every(h)} {muon_lr2} {inner} {int4}"),
    ]


def inner_optimizer(settings):
    return "muon" if "optimizer.name=muon" in settings else "adamw"


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    warm = int(os.environ.get("WARM", "1500"))
    warm_batch = int(os.environ.get("WARM_BATCH", "8"))
    warm_lr = float(os.environ.get("WARM_LR", "4.0e-3"))
    steps = int(os.environ.get("STEPS", "420"))
    batch = int(os.environ.get("BATCH", "32"))
    workers = int(os.environ.get("WORKERS", "4"))
    h = int(os.environ.get("H", "14"))
    chosen = os.environ.get("VARIANTS", "all").split()
    matrix.allow_mpirun_as_root()
    matrix.build(build_dir, ["train", "tokenize"])
    prepare_corpus(build_dir)
    model = ["model.n_layer=2", "model.n_head=4", "model.d_model=64", "model.seq_len=64",
             "model.vocab_size=4096", f"data.train={CORPUS}/train", f"data.val={CORPUS}/val",
             f"data.tokenizer={CORPUS}/tokenizer.model", "train.eval_tokens=65536",
             "train.log_every=100", "parallel.gpus_per_node=1"]
    with matrix.Scratch() as work:
        print(matrix.header(f"warm-up {warm} steps of {workers}×{warm_batch} sequences, then "
                            f"{steps} steps; workers {workers}, batch {batch} per worker, "
                            f"corpus {CORPUS}"))
        matrix.train(build_dir, workers,
                     model + [f"train.steps={warm}", f"train.global_batch={workers * warm_batch}",
                              f"train.micro_batch={warm_batch}", *lr(warm_lr).split(),
                              "train.eval_every=0", f"checkpoint.every={warm}"], "warm", work)
        start = os.path.join(work, "warm", "checkpoints", f"step_{warm:08d}.h5")
        warm_lines = metrics.read(os.path.join(work, "warm", "metrics.jsonl"))
        print(f"warm-up: val_loss {metrics.last_with(warm_lines, 'val_loss')['val_loss']:.4f}")
        common = model + [f"train.steps={steps}", f"train.micro_batch={batch}",
                          "train.eval_every=0", "checkpoint.every=0"]
        print("| run | settings | val_loss | vs data-parallel, same optimizer | vs the best "
              "data-parallel | bytes across workers | fewer bytes |")
        print("|---|---|---|---|---|---|---|", flush=True)
        best = {}  # inner optimizer: (val_loss, bytes) of its best data-parallel run so far
        for name, settings in variants(h):
            if chosen != ["all"] and name not in chosen:
                continue
            path = train_variant(build_dir, work, workers, batch, common, name, settings,
                                 ["--init", start])
            if path is None:
                continue
            val, cross, _, _ = summary(metrics.read(path))
            optimizer = inner_optimizer(settings)
            if name.startswith("baseline"):
                if optimizer not in best or val < best[optimizer][0]:
                    best[optimizer] = (val, cross)
            label = settings.replace("diloco.", "").replace("optimizer.", "")
            if name.startswith("baseline"):
                label = f"data-parallel, batch {workers * batch}, " + label

            def gap(reference):
                return f"{(val - reference[0]) / reference[0] * 100:+.2f}%" if reference else ""
            same = best.get(optimizer)
            overall = min(best.values()) if best else None
            ratio = f"{overall[1] / cross:.0f}×" if overall and cross else ""
            print(f"| {name} | {label} | {val:.4f} | {gap(same)} | {gap(overall)} | "
                  f"{cross / 1e6:.1f} MB | {ratio} |", flush=True)

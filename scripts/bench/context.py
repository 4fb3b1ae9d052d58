"""scripts/bench_context.sh: context parallelism against sequence length on this host's CPU.

A tiny GPT (2 layers, d_model 64, 4 heads) trains STEPS steps of 2 sequences (micro-batches of
one) on data/fortunes at each seq_len of SEQ_LENS, with every sequence on one rank (cp 1) and
split over cp 2 and 4 ranks, their K/V passed around the ring and gathered (all_gather), and on 2
data-parallel ranks (dp 2: each rank one whole sequence, what the same ranks run without cp). Per
run:
the median step time and tokens/s; the activation memory of a rank (the run's own account,
activation_mib) next to the planner's (`plan --explain`, memory_bytes_by_stage: exact, or the
row says "differs"); and the bytes a rank sent over the cp group in a step (comm_bytes_by_axis.cp)
next to the planner's. The cp runs use cp ranks on the host's cores (oversubscribed past them),
so their tokens/s says what splitting costs here, not what cp devices would gain."""
import os

from bench import explain, matrix, metrics

MODEL = ["model.n_layer=2", "model.d_model=64", "model.n_head=4"]
# (dp, cp, cp_comm)
LAYOUTS = [(1, 1, "ring"), (2, 1, "ring"), (1, 2, "ring"), (1, 2, "all_gather"), (1, 4, "ring"),
           (1, 4, "all_gather")]


def overrides(seq_len, dp, cp, comm, steps):
    return MODEL + [f"model.seq_len={seq_len}", f"parallel.dp={dp}", f"parallel.cp={cp}",
                    f"parallel.cp_comm={comm}",
                    f"train.steps={steps}", "train.micro_batch=1", "train.global_batch=2",
                    "train.eval_every=0", f"train.eval_tokens={seq_len + 1}", "train.log_every=1",
                    "checkpoint.every=0", "optimizer.warmup_steps=0"]


def run_row(seq_len, dp, cp, comm, lines, priced):
    """One run's report row from its metrics lines and the planner's `explain` object."""
    steps = metrics.training(lines)
    step_ms = metrics.median_step_ms(steps)
    tokens_per_s = 2 * seq_len / (step_ms / 1000.0)
    last = metrics.last_with(lines, "activation_mib")
    measured_mib = last["activation_mib"]
    planned_mib = priced["memory_bytes_by_stage"][0]["activations"] / 2**20
    sent = steps[-1]["comm_bytes_by_axis"].get("cp", 0)
    planned_sent = priced["comm_bytes_by_axis"].get("cp", 0)
    memory = "exact" if abs(measured_mib - planned_mib) < 0.0005 else "differs"
    cp_bytes = "exact" if sent == planned_sent else f"differs ({planned_sent})"
    layout = (f"dp {dp}" if cp == 1 else f"cp {cp} {comm}")
    return (f"| {seq_len} | {layout} | {step_ms:.0f} | {tokens_per_s:.0f} | "
            f"{measured_mib:.2f} ({memory}) | {sent / 2**20:.2f} ({cp_bytes}) |")


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    steps = int(os.environ.get("STEPS", "4"))
    seq_lens = [int(t) for t in os.environ.get("SEQ_LENS", "1024 2048 4096 8192 16384").split()]
    matrix.allow_mpirun_as_root()
    matrix.build(build_dir, ["train", "tokenize", "plan"])
    matrix.prepare_fortunes(build_dir)
    plan = os.path.join(build_dir, "bin", "plan")
    with matrix.Scratch() as work:
        print(matrix.header(f"steps {steps} seq_lens {seq_lens} load {matrix.load()}"))
        print("| seq_len | layout | step ms | tokens/s | activation MiB per rank (planner) "
              "| cp MiB sent per step (planner) |")
        print("|---|---|---|---|---|---|", flush=True)
        for seq_len in seq_lens:
            for dp, cp, comm in LAYOUTS:
                sets = overrides(seq_len, dp, cp, comm, steps)
                name = f"t{seq_len}_dp{dp}_cp{cp}_{comm}"
                ranks = dp * cp
                lines = metrics.read(matrix.train(build_dir, ranks, sets, name, work))
                cluster = explain.write_cpu_cluster(os.path.join(work, "cluster.yaml"), ranks)
                priced = explain.explain(plan, "configs/fortunes.yaml", cluster, ranks,
                                         [f"run.dir={work}", *sets])
                print(run_row(seq_len, dp, cp, comm, lines, priced), flush=True)

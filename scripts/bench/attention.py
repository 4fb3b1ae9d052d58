"""scripts/bench_cpu_attention.sh: the CPU backend's causal attention (`bench attention --device
cpu`) at growing sequence lengths, forward and backward time and the scratch memory each pass grew,
beside the same tool of another build (BASELINE, a `bench` binary: e.g. one built before a kernel
change) measured in the same run.

For each length, ROUNDS alternating rounds of the two binaries, each a fresh process reporting the
median of REPEATS calls; the best round of each is kept. Raw JSON lines first, then the table."""
import json
import os
import subprocess

from bench import matrix


def table(rows):
    """The report of the raw rows (side, result): per length, each side's best forward and
    backward milliseconds, their ratio (baseline over this build: above 1, this build is faster)
    and the scratch each pass grew."""
    best = {}
    for side, r in rows:
        key = (side, r["seq_len"])
        total = r["forward_ms"] + r["backward_ms"]
        if key not in best or total < best[key]["forward_ms"] + best[key]["backward_ms"]:
            best[key] = r
    lengths = sorted({t for _, t in best})
    out = ["| T | fwd ms | bwd ms | fwd+bwd vs baseline | fwd scratch | bwd scratch | "
           "baseline fwd ms | baseline bwd ms | baseline bwd scratch |",
           "|---|---|---|---|---|---|---|---|---|"]
    mib = 1 << 20
    for t in lengths:
        new, old = best.get(("build", t)), best.get(("baseline", t))
        if new is None:
            continue
        ratio = "-"
        cells = ["-", "-", "-"]
        if old is not None:
            ratio = (f"{(old['forward_ms'] + old['backward_ms']) / (new['forward_ms'] + new['backward_ms']):.2f}x")
            cells = [f"{old['forward_ms']:.1f}", f"{old['backward_ms']:.1f}",
                     f"{old['backward_scratch_bytes'] / mib:.2f} MiB"]
        out.append(f"| {t} | {new['forward_ms']:.1f} | {new['backward_ms']:.1f} | {ratio} | "
                   f"{new['forward_scratch_bytes'] / mib:.2f} MiB | "
                   f"{new['backward_scratch_bytes'] / mib:.2f} MiB | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv):
    build_dir = os.environ.get("BUILD_DIR", "build")
    baseline = os.environ.get("BASELINE", "")
    lengths = [int(t) for t in os.environ.get("SEQ_LENS", "1024 2048 4096").split()]
    rounds = int(os.environ.get("ROUNDS", "3"))
    shape = ["--batch", os.environ.get("BATCH", "1"), "--heads", os.environ.get("HEADS", "12"),
             "--head-size", os.environ.get("HEAD_SIZE", "64"),
             "--repeats", os.environ.get("REPEATS", "5"), "--dtype", "fp32"]
    matrix.build(build_dir, ["bench"])
    sides = [("build", os.path.join(build_dir, "bin", "bench"))]
    if baseline:
        sides.append(("baseline", baseline))
    print(matrix.header(f"rounds {rounds} {' '.join(shape)} baseline '{baseline}'"))
    rows = []
    for t in lengths:
        for _ in range(rounds):
            for side, binary in sides:
                line = subprocess.run([binary, "attention", "--device", "cpu", "--seq-len", str(t),
                                       *shape], check=True, capture_output=True,
                                      text=True).stdout.strip()
                print(side, line, flush=True)
                rows.append((side, json.loads(line)))
    print()
    print(table(rows))

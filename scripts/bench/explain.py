"""The analytic figures a benchmark compares its runs with, from the planner:
`plan CONFIG --layout given --explain 1 --json true --set ...` prices exactly the run's config and
reports, under metrics.jsonl's own names, the parameter count, the memory account of every
pipeline stage and rank 0's and the job's bytes per step (tools/plan.cpp explain_json). The
planner computes them with the trainer's own partition and reduction functions, so reading them
here keeps the benchmarks from carrying a second copy of the formulas that could drift."""
import json
import os
import subprocess

# A cpu cluster of one host: the planner needs one to price a layout, but the figures read here
# (bytes, memory account, parameters) depend on the config and the world only, not on speeds. On
# a cpu cluster the nodes stay the config's simulated ones (parallel.gpus_per_node).
CPU_CLUSTER = """name: bench-host
backend: cpu
nodes: 1
devices_per_node: {devices}
cores_per_node: {cores}
device:
  name: cpu rank
  memory_gib: 1024
  peak_tflops: {{fp32: 0.1, bf16: 0.1, fp16: 0.1}}
  memory_bandwidth_gbs: 10
  sustained:
    matmul_tflops: {{fp32: 0.1, bf16: 0.1, fp16: 0.1}}
    attention_tflops: {{fp32: 0.05, bf16: 0.05, fp16: 0.05}}
    elementwise_gbs: 10
    op_overhead_us: 0
links:
  intra_node: {{bandwidth_gbs: 5, latency_us: 5}}
  inter_node: {{bandwidth_gbs: 5, latency_us: 5}}
"""


def write_cpu_cluster(path, devices):
    """A cluster file of `devices` cpu ranks on this host, for the figures above."""
    with open(path, "w") as file:
        file.write(CPU_CLUSTER.format(devices=devices, cores=os.cpu_count() or 1))
    return path


def calibrate(bench, ranks, out, mpirun_args, rows, width, seq_len, heads):
    """`bench calibrate` on `ranks` ranks: this machine as a planner cluster file at `out`, its
    passes timed at the given sizes; returns what it printed."""
    args = ["mpirun", *mpirun_args, "-np", str(ranks), bench, "calibrate", "--out", out,
            "--rows", str(rows), "--width", str(width), "--seq-len", str(seq_len), "--heads",
            str(heads)]
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout.strip()


def command(plan, config, cluster, world, overrides):
    """The plan command line pricing `config` with the `--set` `overrides` (key=value strings)."""
    args = [plan, config, "--cluster", cluster, "--world", str(world), "--layout", "given",
            "--explain", "1", "--json", "true"]
    for override in overrides:
        args += ["--set", override]
    return args


def parse(text):
    """The explained plan's line of plan's JSON output: its fields, "explain" among them."""
    for line in text.splitlines():
        if line.strip():
            plan = json.loads(line)
            if "explain" in plan:
                return plan
    raise ValueError("plan printed no explained plan (was --explain given?)")


def explain(plan, config, cluster, world, overrides):
    """`explain` of the run `train CONFIG --set OVERRIDES...` on `world` ranks."""
    done = subprocess.run(command(plan, config, cluster, world, overrides), capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"plan failed: {done.stderr.strip() or done.stdout.strip()}")
    return parse(done.stdout)["explain"]


"""`python3 -m bench NAME [ARGS]`: runs benchmark NAME's main() with ARGS (the shell scripts'
thin entry point). Names map to modules here so that adding a benchmark is one line."""
import importlib
import sys

BENCHMARKS = {
    "attention": "bench.attention",
    "context": "bench.context",
    "cpu": "bench.cpu",
    "diloco": "bench.diloco",
    "diloco_warm": "bench.diloco_warm",
    "elastic": "bench.elastic",
    "fp8": "bench.fp8",
    "layouts": "bench.layouts",
    "moe": "bench.moe",
    "optimizers": "bench.optimizers",
    "precision": "bench.precision",
    "robust": "bench.robust",
    "schedules": "bench.schedules",
    "swarm": "bench.swarm",
    "zero": "bench.zero",
    "zero_plus_plus": "bench.zero_plus_plus",
    "validate_planner": "bench.planner",
}


def main(argv):
    if not argv or argv[0] not in BENCHMARKS:
        print(f"usage: python3 -m bench {{{','.join(BENCHMARKS)}}} [ARGS...]", file=sys.stderr)
        return 2
    return importlib.import_module(BENCHMARKS[argv[0]]).main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

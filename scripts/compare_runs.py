#!/usr/bin/env python3
"""Compares a run's metrics.jsonl with a reference run's: the GPU jobs' check that the CUDA backend
trains what the CPU backend trains (scripts/gpu_check.sh, mode `run`).

  compare_runs.py losses REFERENCE RUN --steps N --tolerance R
      every step 1..N's training loss within relative error R of the reference's
  compare_runs.py val_loss REFERENCE RUN --tolerance R
      the last val_loss within relative error R of the reference's last

REFERENCE and RUN are metrics.jsonl files (one JSON object per line; training lines carry `step`
and `loss`, evaluation lines `step` and `val_loss`). Prints one line: `pass` or `FAIL`, then the
figures; exits 0 on pass, 1 on a failed comparison, 2 when a file lacks what is compared.
"""
import argparse
import json
import math
import sys


def read(path, key):
    """{step: value} of the lines holding `key` (the last one wins for a repeated step)."""
    values = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            line = line.strip()
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if key in record and "step" in record:
                values[int(record["step"])] = float(record[key])
    return values


def relative(value, reference):
    return abs(value - reference) / max(abs(reference), 1e-30)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["losses", "val_loss"])
    parser.add_argument("reference")
    parser.add_argument("run")
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--tolerance", type=float, required=True)
    args = parser.parse_args()

    key = "loss" if args.what == "losses" else "val_loss"
    reference, run = read(args.reference, key), read(args.run, key)
    if args.what == "losses":
        steps = range(1, args.steps + 1)
        absent = [s for s in steps if s not in reference or s not in run]
        if absent:
            print(f"FAIL losses: step {absent[0]} missing ({len(absent)} steps absent)")
            return 2
        errors = [relative(run[s], reference[s]) for s in steps]
        worst = max(range(len(errors)), key=lambda i: errors[i])
        bad = [s for s, e in zip(steps, errors) if not e <= args.tolerance]
        verdict = "pass" if not bad else "FAIL"
        print(f"{verdict} losses steps 1-{args.steps}: max relative error {errors[worst]:.3g} at "
              f"step {worst + 1} ({run[worst + 1]:.6f} vs {reference[worst + 1]:.6f}), "
              f"{len(bad)} over {args.tolerance:g}; step {args.steps}: {run[args.steps]:.6f} vs "
              f"{reference[args.steps]:.6f}")
        return 0 if not bad else 1
    if not reference or not run:
        print("FAIL val_loss: no val_loss line in " +
              (args.reference if not reference else args.run))
        return 2
    ref_step, run_step = max(reference), max(run)
    error = relative(run[run_step], reference[ref_step])
    ok = math.isfinite(run[run_step]) and error <= args.tolerance
    print(f"{'pass' if ok else 'FAIL'} val_loss: {run[run_step]:.4f} at step {run_step} vs "
          f"{reference[ref_step]:.4f} at step {ref_step}, relative error {error:.3g} "
          f"(bound {args.tolerance:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Where a CUDA program's GPU time goes, from Nsight Compute's CSV of per-launch durations.

    ncu --metrics gpu__time_duration.sum --csv --log-file ncu.csv PROGRAM...
    python3 scripts/kernel_profile.py ncu.csv [--top N]

Sums gpu__time_duration over the launches of each kernel (its name without template arguments
and parameters) and prints one line per kernel, largest first: total milliseconds, share of the
total, launches and mean microseconds per launch. ncu serialises launches, so the sum is GPU busy
time without overlap, the figure that says which kernel to work on first.
"""
import argparse
import collections
import csv
import io
import re
import sys

UNITS = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}


def short_name(name):
    """`void ns::kernel<float, 64>(float*, ...)` -> `ns::kernel`."""
    name = re.sub(r"^void ", "", name.strip()).replace("(anonymous namespace)::", "")
    depth, out = 0, []
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            if ch == "(":
                break
            out.append(ch)
    return "".join(out)


def read_rows(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"error: {path} has no ncu CSV header (a line starting with \"ID\")")
    return csv.DictReader(io.StringIO("".join(lines[start:])))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    total_ms = collections.Counter()
    launches = collections.Counter()
    for row in read_rows(args.csv):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = UNITS.get(row.get("Metric Unit", ""))
        if unit is None:
            sys.exit(f"error: unknown time unit '{row.get('Metric Unit')}' in {args.csv}")
        value = float(row["Metric Value"].replace(",", ""))
        name = short_name(row["Kernel Name"])
        total_ms[name] += value * unit
        launches[name] += 1
    if not total_ms:
        sys.exit(f"error: {args.csv} holds no gpu__time_duration.sum values")
    overall = sum(total_ms.values())
    print(f"{'kernel':60} {'ms':>9} {'share':>6} {'launches':>8} {'us/launch':>9}")
    for name, ms in total_ms.most_common(args.top):
        print(f"{name[:60]:60} {ms:9.3f} {100 * ms / overall:5.1f}% {launches[name]:8d} "
              f"{1000 * ms / launches[name]:9.1f}")
    print(f"{'total (' + str(len(total_ms)) + ' kernels)':60} {overall:9.3f} 100.0% "
          f"{sum(launches.values()):8d}")


if __name__ == "__main__":
    main()

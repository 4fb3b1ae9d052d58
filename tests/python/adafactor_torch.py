#!/usr/bin/env python3
"""torch.optim.Adafactor, in float64, on the tensors and gradients adafactor_torch_test wrote.

    python adafactor_torch.py DIR

DIR/tensors.txt has a line per tensor: name, rows, cols (1 and size for a vector: torch keeps a
full second moment for tensors of one dimension), whether weight decay applies (0/1), and its
element count; DIR/params.f32 its initial values, DIR/grads_<step>.f32 each step's gradients and
DIR/strata.f32 Strata's parameters after the steps, all float32 in the order of tensors.txt;
DIR/lr.txt the learning rate of each step. Prints the largest difference relative to 1 + |torch|
over every element and exits 1 when it exceeds --tolerance.
"""
import argparse
import pathlib
import sys

import numpy as np
import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=pathlib.Path)
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--eps1", type=float, required=True)
    parser.add_argument("--eps2", type=float, required=True)
    parser.add_argument("--beta2-decay", type=float, required=True)
    parser.add_argument("--d", type=float, required=True)
    parser.add_argument("--weight-decay", type=float, required=True)
    args = parser.parse_args()

    tensors = [line.split() for line in (args.dir / "tensors.txt").read_text().splitlines()]
    lrs = [float(x) for x in (args.dir / "lr.txt").read_text().split()]
    initial = np.fromfile(args.dir / "params.f32", dtype="<f4")
    strata = np.fromfile(args.dir / "strata.f32", dtype="<f4")
    grads = [np.fromfile(args.dir / f"grads_{s + 1}.f32", dtype="<f4") for s in range(len(lrs))]

    def pieces(flat):
        out, at = [], 0
        for _, rows, cols, _, size in tensors:
            rows, cols, size = int(rows), int(cols), int(size)
            chunk = torch.from_numpy(flat[at:at + size].astype(np.float64))
            out.append(chunk.reshape(rows, cols) if rows > 1 else chunk)
            at += size
        if at != flat.size:
            sys.exit(f"error: {flat.size} values for tensors of {at} elements")
        return out

    params = [torch.nn.Parameter(p) for p in pieces(initial)]
    decayed = [p for p, t in zip(params, tensors) if t[3] == "1"]
    others = [p for p, t in zip(params, tensors) if t[3] == "0"]
    # eps1 given explicitly: torch's default is the parameters' dtype's epsilon, float64's here,
    # where Strata's is float32's.
    optimizer = torch.optim.Adafactor(
        [{"params": decayed, "weight_decay": args.weight_decay},
         {"params": others, "weight_decay": 0.0}],
        lr=lrs[0], beta2_decay=args.beta2_decay, eps=(args.eps1, args.eps2), d=args.d)
    for step, lr in enumerate(lrs):
        for group in optimizer.param_groups:
            group["lr"] = lr
        for p, g in zip(params, pieces(grads[step])):
            p.grad = g
        optimizer.step()

    worst, where = 0.0, ""
    for (name, *_), p, s in zip(tensors, params, pieces(strata)):
        expected = p.detach().reshape(-1)
        error = ((s.reshape(-1) - expected).abs() / (1 + expected.abs())).max().item()
        if error > worst:
            worst, where = error, name
    moved = max((p.detach().reshape(-1) - q.reshape(-1)).abs().max().item()
                for p, q in zip(params, pieces(initial)))
    print(f"largest relative difference {worst:.3e} ({where}); largest step {moved:.3e}")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())

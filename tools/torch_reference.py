#!/usr/bin/env python3
"""Strata's loss and gradients against PyTorch's autograd on the same weights and windows.

Given a Strata checkpoint, the token split `eval` read, the val_loss it printed and the file
`eval --gradients` wrote, this builds tools/bench_torch.py's model (GPT-2, or the Llama family's
block that the checkpoint's model.* keys choose: docs/ARCHITECTURE.md §5 "The block's
architecture") twice, in fp64 and in fp32, loads the checkpoint's weights into both, computes the
mean cross-entropy over eval's windows (ARCHITECTURE §5 "Evaluation": the first N tokens of the
split, shards in sorted order, window i holding tokens [i·T, i·T + T]) and its gradient by
autograd, and compares, taking fp64 as the truth:

  loss       |val_loss − loss_fp64| ≤ tol · |loss_fp64|
  gradients  for every tensor, ||g_strata − g_fp64|| ≤ tol · ||g_fp64|| (a tensor whose fp64
             gradient is 0 must be 0), and the file holds every checkpoint tensor, shaped alike

with tol 1e-5 (--tolerance). PyTorch's own fp32 figures against fp64 are printed beside Strata's,
as the yardstick of what fp32 arithmetic gives. The checkpoint is read with h5py (the /model/<name>
datasets, the root attribute `config`), as a user reading the format would; Strata's sealed files
keep their HDF5 data after a user block, which HDF5 finds by itself.

Usage: torch_reference.py --checkpoint CKPT --data PATH --val-loss X --gradients FILE.safetensors
                          [--tokens N] [--tolerance 1e-5] [--threads 2]
PATH is a shard file, a folder of *.h5 shards or a glob, as eval's --data; N defaults to the
checkpoint's train.eval_tokens. Prints a line per tensor and a summary; exits 0 and prints
"torch_reference: all checks passed" when every check holds, else 1 (2 on bad input).
"""
import argparse
import glob
import os
import re
import sys

import h5py
import numpy as np
import torch
import yaml
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch  # noqa: E402  (beside this file)

# Strata's tensor of a block → the bench_torch Block parameter it is (or is a part of).
BLOCK_NAMES = {"ln1": "ln1", "attn.qkv": "qkv", "attn.q": "qkv", "attn.k": "qkv", "attn.v": "qkv",
               "attn.proj": "proj", "ln2": "ln2", "mlp.fc": "fc", "mlp.proj": "fc_proj"}


def torch_name(name):
    """The bench_torch parameter a checkpoint tensor is, or a part of (q, k and v are the rows of
    one qkv product, in that order)."""
    if name in ("wte", "wpe"):
        return name + ".weight"
    if name.split(".")[0] in ("lnf", "lm_head"):
        return name
    match = re.fullmatch(r"h\.(\d+)\.(.+)\.(weight|bias)", name)
    if not match or match.group(2) not in BLOCK_NAMES:
        raise ValueError(f"checkpoint tensor '{name}' has no counterpart in the reference model")
    return f"blocks.{match.group(1)}.{BLOCK_NAMES[match.group(2)]}.{match.group(3)}"


def shard_files(spec):
    """eval's --data: a folder's *.h5 files, a file, or a glob's matches, in byte order."""
    if os.path.isdir(spec):
        files = [os.path.join(spec, f) for f in os.listdir(spec) if f.endswith(".h5") and
                 os.path.isfile(os.path.join(spec, f))]
    elif os.path.exists(spec):
        files = [spec]
    else:
        files = [f for f in glob.glob(spec) if os.path.isfile(f)]
    if not files:
        raise ValueError(f"--data '{spec}' names no token shards")
    return sorted(files, key=os.fsencode)


def eval_windows(spec, n_tokens, seq_len):
    """(inputs, targets), each (windows, T) int64: the windows of the first n_tokens."""
    parts, have = [], 0
    for path in shard_files(spec):
        if have >= n_tokens:
            break
        with h5py.File(path, "r") as f:
            part = f["tokens"][: n_tokens - have].astype(np.int64)
        parts.append(part)
        have += len(part)
    tokens = np.concatenate(parts)
    count = (len(tokens) - 1) // seq_len
    if count == 0:
        raise ValueError(f"--data '{spec}' has fewer than seq_len + 1 = {seq_len + 1} tokens "
                         f"in the first {n_tokens}")
    inputs = np.stack([tokens[i * seq_len:i * seq_len + seq_len] for i in range(count)])
    targets = np.stack([tokens[i * seq_len + 1:i * seq_len + seq_len + 1] for i in range(count)])
    return torch.from_numpy(inputs), torch.from_numpy(targets)


def read_checkpoint(path):
    """(the run's config as a dict, {name: fp32 array} of /model, in h5py's order: by name)."""
    with h5py.File(path, "r") as f:
        text = f.attrs["config"]
        config = yaml.safe_load(text.decode() if isinstance(text, bytes) else text)
        tensors = {name: np.asarray(f["model"][name], dtype=np.float32) for name in f["model"]}
    return config, tensors


def build_model(config, tensors, dtype):
    """bench_torch's model of the checkpoint's shape and architecture, holding its weights in
    `dtype`. Returns (model, {torch name: [checkpoint names, in row order]})."""
    m = config["model"]
    arch = bench_torch.model_arch(m)
    bench_torch.check_shape({"n_head": m["n_head"], "d_model": m["d_model"]}, arch)
    model = bench_torch.Gpt(m["n_layer"], m["n_head"], m["d_model"], m["seq_len"],
                            m["vocab_size"], False, arch).to(dtype)
    parts = {}
    for name in tensors:
        parts.setdefault(torch_name(name), []).append(name)
    for group in parts.values():  # the qkv product's rows: q, then k, then v
        group.sort(key=lambda n: "qkv".find(n.split(".")[-2]) if ".attn." in n else 0)
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(parts))
    if missing or set(parts) - set(params):
        raise ValueError(f"the checkpoint's tensors and the reference model's differ: model "
                         f"without a tensor {missing}, tensors without a parameter "
                         f"{sorted(set(parts) - set(params))}")
    with torch.no_grad():
        for torch_key, names in parts.items():
            value = torch.cat([torch.from_numpy(tensors[n]) for n in names], dim=0)
            if value.shape != params[torch_key].shape:
                raise ValueError(f"{'+'.join(names)}: shape {tuple(value.shape)}, the model's "
                                 f"{torch_key} is {tuple(params[torch_key].shape)}")
            params[torch_key].copy_(value.to(dtype))
    return model, parts


def loss_and_gradients(model, parts, tensors, inputs, targets, chunk=64):
    """The mean cross-entropy over all targets (a float) and its gradient per checkpoint tensor,
    in fp64 numpy, from autograd in the model's own dtype."""
    model.zero_grad(set_to_none=True)
    count, total = targets.numel(), 0.0
    for begin in range(0, len(inputs), chunk):
        logits = model.logits(inputs[begin:begin + chunk])
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets[begin:begin + chunk].reshape(-1),
            reduction="sum") / count
        loss.backward()
        total += loss.item()
    params = dict(model.named_parameters())
    grads = {}
    for torch_key, names in parts.items():
        rows = [tensors[n].shape[0] for n in names]
        for name, g in zip(names, torch.split(params[torch_key].grad, rows, dim=0)):
            grads[name] = g.double().numpy()
    return total, grads


def relative(a, b):
    """||a − b|| / ||b||; where b is 0: 0 if a is too, else inf."""
    diff, norm = float(np.linalg.norm(a - b)), float(np.linalg.norm(b))
    return diff / norm if norm else (0.0 if diff == 0 else float("inf"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a Strata checkpoint (.h5)")
    parser.add_argument("--data", required=True, help="the token split eval read")
    parser.add_argument("--tokens", type=int, help="eval's --tokens (default: train.eval_tokens)")
    parser.add_argument("--val-loss", type=float, required=True, help="the val_loss eval printed")
    parser.add_argument("--gradients", required=True, help="what eval --gradients wrote")
    parser.add_argument("--tolerance", type=float, default=1e-5, help="relative, default 1e-5")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    flag = "--checkpoint"  # what the message of a failure below names
    try:
        config, tensors = read_checkpoint(args.checkpoint)
        n_tokens = args.tokens or config["train"]["eval_tokens"]
        flag = "--data"
        inputs, targets = eval_windows(args.data, n_tokens, config["model"]["seq_len"])
        flag = "--gradients"
        with safe_open(args.gradients, "numpy") as f:
            strata = {name: f.get_tensor(name).astype(np.float64) for name in f.keys()}
            metadata = f.metadata() or {}
        flag = "--checkpoint"
        models = {dtype: build_model(config, tensors, dtype)
                  for dtype in (torch.float64, torch.float32)}
    except (OSError, KeyError, ValueError) as e:
        print(f"error: {flag}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    results = {dtype: loss_and_gradients(model, parts, tensors, inputs, targets)
               for dtype, (model, parts) in models.items()}
    loss64, grads64 = results[torch.float64]
    loss32, grads32 = results[torch.float32]
    tol, failures = args.tolerance, []

    def check(ok, message):
        print(("ok    " if ok else "FAIL  ") + message)
        if not ok:
            failures.append(message)

    m = config["model"]
    arch = {k: v for k, v in bench_torch.model_arch(m).items() if v != bench_torch.ARCH[k]}
    print(f"torch {torch.__version__}; {len(inputs)} windows of {m['seq_len']} tokens; model "
          f"{m['n_layer']} layers, d_model {m['d_model']}, {m['n_head']} heads, vocab "
          f"{m['vocab_size']}; architecture {arch or 'GPT-2'}")
    loss_error = abs(args.val_loss - loss64) / abs(loss64)
    check(loss_error <= tol, f"loss: strata {args.val_loss:.6f} (file: {metadata.get('loss')}) vs "
          f"torch fp64 {loss64:.9f}: relative {loss_error:.2e} (torch fp32 "
          f"{abs(loss32 - loss64) / abs(loss64):.2e}) <= {tol:g}")
    if "loss" in metadata:  # all its digits: the file's loss against fp64 without the printing
        print(f"      the file's loss {float(metadata['loss']):.9f}: relative "
              f"{abs(float(metadata['loss']) - loss64) / abs(loss64):.2e}")
    check(bool(strata) and set(strata) == set(tensors),
          f"gradients: the file holds the checkpoint's {len(tensors)} tensors "
          f"(missing {sorted(set(tensors) - set(strata))}, extra {sorted(set(strata) - set(tensors))})")
    worst = (0.0, "", 0.0)
    print(f"      {'tensor':32} {'shape':>12} {'||g||':>10} {'strata':>9} {'torch32':>9}")
    for name in tensors:
        if name not in strata:
            continue
        if strata[name].shape != grads64[name].shape:
            check(False, f"{name}: shape {strata[name].shape} in the file, "
                  f"{grads64[name].shape} in the checkpoint")
            continue
        error, error32 = relative(strata[name], grads64[name]), relative(grads32[name],
                                                                          grads64[name])
        print(f"      {name:32} {str(tuple(strata[name].shape)):>12} "
              f"{np.linalg.norm(grads64[name]):10.3e} {error:9.2e} {error32:9.2e}")
        if error > tol:
            check(False, f"{name}: ||g_strata - g_fp64|| / ||g_fp64|| = {error:.2e} > {tol:g}")
        if error >= worst[0]:
            worst = (error, name, error32)
    worst32 = max(relative(grads32[n], grads64[n]) for n in tensors)
    check(worst[0] <= tol, f"gradients: worst ||g_strata - g_fp64|| / ||g_fp64|| = "
          f"{worst[0]:.2e} ({worst[1]}; torch fp32's worst {worst32:.2e}) <= {tol:g}")
    if failures:
        print(f"torch_reference: {len(failures)} check(s) failed")
        return 1
    print("torch_reference: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

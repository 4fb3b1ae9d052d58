"""What the Hugging Face checks (hf_gpt2.py, hf_llama.py) share: the tolerances, the evaluation
windows of docs/ARCHITECTURE.md §5, transformers' logits and loss over them, Strata's tools run as
subprocesses, and the checks' report."""

import argparse
import re
import subprocess
import sys

import numpy as np
import torch
import transformers

LOGIT_TOLERANCE = 1e-4  # max |difference|: both are fp32 sums in different orders
LOSS_TOLERANCE = 1e-5   # relative; eval prints 6 decimals (under 2e-7 relative at loss ~5)

failures = []


def check(ok, message):
    print(("ok    " if ok else "FAIL  ") + message)
    if not ok:
        failures.append(message)


def finish(name):
    """The script's exit status: 0 when every check held."""
    if failures:
        print(f"{name}: {len(failures)} check(s) failed")
        return 1
    print(f"{name}: all checks passed")
    return 0


def windows(tokens, seq_len):
    """ARCHITECTURE §5 "Evaluation": window i holds tokens [i·T, i·T+T]; inputs its first T,
    targets its last T."""
    count = (len(tokens) - 1) // seq_len
    inputs = np.stack([tokens[i * seq_len:i * seq_len + seq_len] for i in range(count)])
    targets = np.stack([tokens[i * seq_len + 1:i * seq_len + seq_len + 1] for i in range(count)])
    return inputs, targets


def hf_logits_and_loss(model, inputs, targets):
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(inputs).long()).logits.float()
    vocab = logits.shape[-1]
    loss = torch.nn.functional.cross_entropy(logits.double().reshape(-1, vocab),
                                             torch.from_numpy(targets).long().reshape(-1))
    return logits.numpy(), loss.item()


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("command failed: " + " ".join(command) + "\n" + result.stdout + result.stderr)
    return result.stdout


def strata_val_loss(args, checkpoint, n_tokens):
    out = run([args.bin + "/eval", "--checkpoint", checkpoint, "--data", args.data,
               "--tokens", str(n_tokens)])
    return float(re.search(r"^val_loss (\S+) ", out, re.M).group(1))


def relative(a, b):
    return abs(a - b) / abs(b)


def check_export_logits(args, model, inputs, targets):
    """transformers' logits and loss of the exported `model` against eval's."""
    logits, loss = hf_logits_and_loss(model, inputs, targets)
    strata_logits = np.load(args.logits)
    check(strata_logits.shape == logits.shape,
          f"export: eval --logits shape {strata_logits.shape} == transformers' {logits.shape}")
    if strata_logits.shape == logits.shape:
        diff = float(np.max(np.abs(strata_logits - logits)))
        check(diff <= LOGIT_TOLERANCE,
              f"export: logits max |strata - transformers| = {diff:.3g} <= {LOGIT_TOLERANCE}")
    check(relative(args.val_loss, loss) <= LOSS_TOLERANCE,
          f"export: val_loss strata {args.val_loss:.6f} vs transformers {loss:.6f}")


def check_import(args, name, reference, save, inputs, targets, n_tokens):
    """A model transformers saves with `save` (into a folder) imports with `ckpt import-hf`, and
    eval's loss on it is transformers' for `reference` (the same weights in fp32)."""
    folder = f"{args.work}/transformers_{len(args.imported)}"
    args.imported.append(folder)
    save(folder)
    checkpoint = folder + ".h5"
    run([args.bin + "/ckpt", "import-hf", folder, checkpoint, "--tokenizer", args.tokenizer])
    _, loss = hf_logits_and_loss(reference, inputs, targets)
    strata = strata_val_loss(args, checkpoint, n_tokens)
    check(relative(strata, loss) <= LOSS_TOLERANCE,
          f"import {name}: eval val_loss {strata:.6f} vs transformers {loss:.6f}")


def argument_parser():
    """The arguments both scripts take."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True, help="the build's bin directory")
    parser.add_argument("--work", required=True, help="a scratch directory")
    parser.add_argument("--hf", required=True, help="the folder ckpt export-hf wrote")
    parser.add_argument("--tokens", required=True, help="the first tokens of the split, int32")
    parser.add_argument("--data", required=True, help="the split eval reads")
    parser.add_argument("--tokenizer", required=True, help="the split's SentencePiece model")
    parser.add_argument("--logits", required=True, help="what eval --logits wrote")
    parser.add_argument("--val-loss", type=float, required=True, help="what eval printed")
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--vocab-size", type=int, required=True)
    return parser


def start(args):
    """Quiet transformers, two threads; the windows of --tokens."""
    args.imported = []
    torch.set_num_threads(2)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    tokens = np.fromfile(args.tokens, dtype="<i4")
    inputs, targets = windows(tokens, args.seq_len)
    print(f"{len(tokens)} tokens, {len(inputs)} windows of {args.seq_len}; "
          f"torch {torch.__version__}, transformers {transformers.__version__}")
    return inputs, targets, len(tokens)

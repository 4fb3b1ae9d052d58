"""Checks Strata's Hugging Face GPT-2 export and import with transformers itself.

Run by hf_gpt2_test.cpp with .venv-test's Python, after it trained a small model, exported it with
`ckpt export-hf` and ran `eval --logits` on it:

  export  GPT2LMHeadModel.from_pretrained loads the exported folder; its logits over the
          evaluation windows of docs/ARCHITECTURE.md §5 equal those `eval --logits` wrote (max
          |difference| <= 1e-4) and the mean cross-entropy over those windows equals `eval`'s
          val_loss (relative 1e-5).
  multiple choice  `eval --multiple-choice --scores` on the same checkpoint: each ending's summed
          log-likelihood after its context (the last seq_len + 1 ids of context and ending,
          docs/ARCHITECTURE.md §5 "Multiple choice") equals transformers' (|difference| <= 1e-4),
          and the accuracies it printed are those transformers' scores give, exactly.
  import  GPT-2 models that transformers makes (random weights) and saves with save_pretrained:
          a GPT2LMHeadModel (names `transformer.…`), its GPT2Model (names without the prefix) and
          a bfloat16 copy; each is read by `ckpt import-hf`, and `eval` on the checkpoint gives
          the val_loss transformers computes for the same weights (relative 1e-5).

Exits 0 and prints "hf_gpt2: all checks passed" when every check holds; otherwise prints what
differs and exits 1.
"""

import argparse
import copy
import json
import re
import subprocess
import sys

import numpy as np
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

LOGIT_TOLERANCE = 1e-4  # max |difference|: both are fp32 sums in different orders
LOSS_TOLERANCE = 1e-5   # relative; eval prints 6 decimals (under 2e-7 relative at loss ~5)
SCORE_TOLERANCE = 1e-4  # |difference| of an ending's log-likelihood, a sum of a few fp32 terms

failures = []


def check(ok, message):
    print(("ok    " if ok else "FAIL  ") + message)
    if not ok:
        failures.append(message)


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


def check_export(args, inputs, targets):
    model = GPT2LMHeadModel.from_pretrained(args.hf)
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


def chosen(values):
    """The first of the largest, as train/multiple_choice.h chooses."""
    return max(range(len(values)), key=lambda k: (values[k], -k))


def check_multiple_choice(args):
    model = GPT2LMHeadModel.from_pretrained(args.hf)
    model.eval()
    examples = [json.loads(line) for line in open(args.choice_scores)]
    worst, correct, correct_norm, agree = 0.0, 0, 0, True
    for example in examples:
        scores = []
        for ending in example["endings"]:
            ids = (example["context"] + ending["tokens"])[-(args.seq_len + 1):]
            with torch.no_grad():
                logits = model(torch.tensor([ids[:-1]])).logits[0].double()
            logprobs = torch.log_softmax(logits, dim=-1)
            n = len(ending["tokens"])
            positions = range(len(ids) - 1 - n, len(ids) - 1)
            scores.append(sum(logprobs[i, ids[i + 1]].item() for i in positions))
            worst = max(worst, abs(scores[-1] - ending["logprob"]))
        norm = [score / len(e["tokens"]) for score, e in zip(scores, example["endings"])]
        correct += chosen(scores) == example["label"]
        correct_norm += chosen(norm) == example["label"]
        agree &= (chosen(scores), chosen(norm)) == (example["chosen"], example["chosen_norm"])
    check(worst <= SCORE_TOLERANCE, f"multiple choice: {len(examples)} examples, ending scores "
          f"max |strata - transformers| = {worst:.3g} <= {SCORE_TOLERANCE}")
    check(agree, "multiple choice: every example's chosen endings agree")
    line = (f"mc_acc {correct / len(examples):.6f} mc_acc_norm "
            f"{correct_norm / len(examples):.6f} over {len(examples)} examples")
    check(line == args.choice_line, f"multiple choice: eval printed '{args.choice_line}', "
          f"transformers gives '{line}'")


def check_import(args, inputs, targets, n_tokens):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=args.vocab_size, n_positions=args.seq_len, n_embd=32,
                        n_layer=2, n_head=2, activation_function="gelu_new",
                        bos_token_id=2, eos_token_id=2)  # the tokenizer's EOS
    model = GPT2LMHeadModel(config)
    # Weights far from the initialisation (LayerNorms and biases too), so that a wrong mapping
    # shows in the loss.
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    cases = [
        ("GPT2LMHeadModel", model, lambda d: model.save_pretrained(d)),
        ("GPT2Model (no prefix)", model, lambda d: model.transformer.save_pretrained(d)),
        ("bfloat16", bf16.float(), lambda d: bf16.save_pretrained(d)),
    ]
    for i, (name, reference, save) in enumerate(cases):
        folder = f"{args.work}/transformers_{i}"
        save(folder)
        checkpoint = folder + ".h5"
        run([args.bin + "/ckpt", "import-hf", folder, checkpoint, "--tokenizer", args.tokenizer])
        _, loss = hf_logits_and_loss(reference, inputs, targets)
        strata = strata_val_loss(args, checkpoint, n_tokens)
        check(relative(strata, loss) <= LOSS_TOLERANCE,
              f"import {name}: eval val_loss {strata:.6f} vs transformers {loss:.6f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True, help="the build's bin directory")
    parser.add_argument("--work", required=True, help="a scratch directory")
    parser.add_argument("--hf", required=True, help="the folder ckpt export-hf wrote")
    parser.add_argument("--tokens", required=True, help="the first tokens of the split, int32")
    parser.add_argument("--data", required=True, help="the split eval reads")
    parser.add_argument("--tokenizer", required=True, help="the split's SentencePiece model")
    parser.add_argument("--logits", required=True, help="what eval --logits wrote")
    parser.add_argument("--val-loss", type=float, required=True, help="what eval printed")
    parser.add_argument("--choice-scores", required=True,
                        help="what eval --multiple-choice --scores wrote")
    parser.add_argument("--choice-line", required=True, help="what it printed")
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--vocab-size", type=int, required=True)
    args = parser.parse_args()
    torch.set_num_threads(2)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    tokens = np.fromfile(args.tokens, dtype="<i4")
    inputs, targets = windows(tokens, args.seq_len)
    print(f"{len(tokens)} tokens, {len(inputs)} windows of {args.seq_len}; "
          f"torch {torch.__version__}")
    check_export(args, inputs, targets)
    check_multiple_choice(args)
    check_import(args, inputs, targets, len(tokens))
    if failures:
        print(f"hf_gpt2: {len(failures)} check(s) failed")
        return 1
    print("hf_gpt2: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

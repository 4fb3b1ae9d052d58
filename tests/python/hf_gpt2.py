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
differs and exits 1. (The Llama family: hf_llama.py; what both share: hf_common.py.)
"""

import copy
import json
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from hf_common import argument_parser, check, check_export_logits, check_import, finish, start

SCORE_TOLERANCE = 1e-4  # |difference| of an ending's log-likelihood, a sum of a few fp32 terms


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


def check_imports(args, inputs, targets, n_tokens):
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
        # (a copy: Module.float() converts in place, and the file must stay bfloat16)
        ("bfloat16", copy.deepcopy(bf16).float(), lambda d: bf16.save_pretrained(d)),
    ]
    for name, reference, save in cases:
        check_import(args, name, reference, save, inputs, targets, n_tokens)


def main():
    parser = argument_parser()
    parser.add_argument("--choice-scores", required=True,
                        help="what eval --multiple-choice --scores wrote")
    parser.add_argument("--choice-line", required=True, help="what it printed")
    args = parser.parse_args()
    inputs, targets, n_tokens = start(args)
    check_export_logits(args, GPT2LMHeadModel.from_pretrained(args.hf), inputs, targets)
    check_multiple_choice(args)
    check_imports(args, inputs, targets, n_tokens)
    return finish("hf_gpt2")


if __name__ == "__main__":
    sys.exit(main())

"""Checks Strata's Hugging Face Llama export and import with transformers itself.

Run by hf_llama_test.cpp with .venv-test's Python, after it trained a small Llama-style model
(RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases, an untied head), exported it with
`ckpt export-hf` and ran `eval --logits` on it:

  export  LlamaForCausalLM.from_pretrained loads the exported folder in fp32; its logits over the
          evaluation windows of docs/ARCHITECTURE.md §5 equal those `eval --logits` wrote (max
          |difference| <= 1e-4) and the mean cross-entropy over those windows equals `eval`'s
          val_loss (relative 1e-5).
  generate  `ckpt import-hf` reads the exported folder back; greedy `generate` on that checkpoint
          writes the text it writes on the trained one, and the text transformers' greedy
          generate writes from the same prompt (the decoder's RoPE at each new position).
  import  Llama models that transformers makes (random weights) and saves with save_pretrained:
          grouped-query with an untied head, RMSNorm eps 1e-6 and rope_theta 500000; multi-head
          with biases and a tied head, saved in bfloat16. Each is read by `ckpt import-hf`, and
          `eval` on the checkpoint gives the val_loss transformers computes for the same weights
          (relative 1e-5).

Exits 0 and prints "hf_llama: all checks passed" when every check holds; otherwise prints what
differs and exits 1.
"""

import copy
import sys

import sentencepiece
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hf_common import argument_parser, check, check_export_logits, check_import, finish, run, start

PROMPT = "the quick brown fox"
NEW_TOKENS = 8  # with the prompt's few tokens, within seq_len: no window slides


def strata_greedy(args, checkpoint):
    return run([args.bin + "/generate", "--checkpoint", checkpoint, "--prompt", PROMPT,
                "--tokens", str(NEW_TOKENS), "--temperature", "0"]).rstrip("\n")


def check_generate(args, model):
    imported = args.work + "/exported_imported.h5"
    run([args.bin + "/ckpt", "import-hf", args.hf, imported])
    text = strata_greedy(args, imported)
    trained = strata_greedy(args, args.checkpoint)
    check(text == trained, f"generate: the imported checkpoint writes {text!r}, the trained one "
          f"{trained!r}")
    tokenizer = sentencepiece.SentencePieceProcessor(model_file=args.tokenizer)
    ids = tokenizer.encode(PROMPT)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                             pad_token_id=tokenizer.eos_id())
    expected = tokenizer.decode(out[0].tolist()).rstrip("\n")
    check(text == expected, f"generate: greedy strata {text!r} vs transformers {expected!r}")


def perturbed(model):
    """`model` with weights far from the initialisation (norm gains and biases too), so that a
    wrong mapping shows in the loss."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def check_imports(args, inputs, targets, n_tokens):
    torch.manual_seed(0)
    common = dict(vocab_size=args.vocab_size, hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=args.seq_len,
                  bos_token_id=2, eos_token_id=2)  # the tokenizer's EOS
    gqa = perturbed(LlamaForCausalLM(LlamaConfig(
        **common, num_key_value_heads=2, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0})))
    check_import(args, "grouped-query, untied", gqa, gqa.save_pretrained, inputs, targets,
                 n_tokens)
    mha = perturbed(LlamaForCausalLM(LlamaConfig(
        **common, num_key_value_heads=4, attention_bias=True, mlp_bias=True,
        tie_word_embeddings=True)))
    bf16 = copy.deepcopy(mha).to(torch.bfloat16)
    check_import(args, "multi-head, biases, tied, bfloat16", copy.deepcopy(bf16).float(),
                 bf16.save_pretrained, inputs, targets, n_tokens)


def main():
    parser = argument_parser()
    parser.add_argument("--checkpoint", required=True, help="the trained checkpoint exported")
    args = parser.parse_args()
    inputs, targets, n_tokens = start(args)
    model = LlamaForCausalLM.from_pretrained(args.hf, dtype=torch.float32)
    model.eval()
    check_export_logits(args, model, inputs, targets)
    check_generate(args, model)
    check_imports(args, inputs, targets, n_tokens)
    return finish("hf_llama")


if __name__ == "__main__":
    sys.exit(main())

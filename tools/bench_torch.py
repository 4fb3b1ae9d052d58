#!/usr/bin/env python3
"""The PyTorch eager reference for `bench train`: the same GPT-2 (learned positions, pre-LN blocks,
causal multi-head attention, tanh-GELU MLP of 4C, final LN, LM head tied to wte), the same batch
shape, fp32, one training step = zero grads, forward, backward, clip to norm 1, AdamW. Prints one
JSON line per thread count tried, with the median step time, like `bench train`.

Usage: bench_torch.py [--n-layer 4 --n-head 4 --d-model 256 --seq-len 256 --vocab 2048
                       --micro-batch 8 --steps 20 --warmup 3 --threads 1,2]
"""
import argparse
import json
import math
import resource
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.n_head))
        scores = scores.masked_fill(mask[:T, :T], float("-inf"))
        y = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, n_layer, n_head, d_model, seq_len, vocab):
        super().__init__()
        padded = (vocab + 127) // 128 * 128
        self.wte = nn.Embedding(padded, d_model)
        self.wpe = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.lnf = nn.LayerNorm(d_model)
        self.vocab = vocab
        mask = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask)
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if "proj" in name else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.blocks:
            x = block(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.t()
        logits = logits[..., : self.vocab]  # padded rows are never targets
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def run(args, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(1234)
    model = Gpt(args.n_layer, args.n_head, args.d_model, args.seq_len, args.vocab)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    tokens = torch.randint(0, args.vocab, (args.micro_batch, args.seq_len + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    tokens_per_step = args.micro_batch * args.seq_len
    print(json.dumps({
        "bench": "train_torch", "torch": torch.__version__, "threads": threads,
        "micro_batch": args.micro_batch, "seq_len": args.seq_len, "steps": args.steps,
        "step_ms": round(1e3 * step_s, 2), "tokens_per_s": round(tokens_per_step / step_s, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "final_loss": round(loss.item(), 4)}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in [("--n-layer", 4), ("--n-head", 4), ("--d-model", 256),
                          ("--seq-len", 256), ("--vocab", 2048), ("--micro-batch", 8),
                          ("--steps", 20), ("--warmup", 3)]:
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts to try")
    args = parser.parse_args()
    for threads in (int(t) for t in args.threads.split(",")):
        run(args, threads)


if __name__ == "__main__":
    main()

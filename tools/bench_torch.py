#!/usr/bin/env python3
"""The PyTorch reference for `bench train`: the same model, the same batch shape, one training
step = zero grads, forward, backward, clip to norm 1, AdamW. Prints one JSON line per run, with the
median step time, like `bench train`. The model is GPT-2 (learned positions, pre-LN blocks, causal
multi-head attention, tanh-GELU MLP of 4C, final LN, LM head tied to wte) unless --config's
model.* keys choose the Llama family's pieces as Strata's do (docs/ARCHITECTURE.md §5 "The block's
architecture"): norm (layernorm | rmsnorm) with norm_eps, mlp (gelu | swiglu) with d_ff and
ffn_multiple_of, position (learned | rope) with rope_theta, kv_heads (grouped-query attention),
bias and tie_embeddings; a line for such a model carries them under "arch". The model is also the
one tools/torch_reference.py checks Strata's loss and gradients against, in fp64 and fp32.

On the CPU (the default) it is the eager fp32 baseline of scripts/bench_cpu.sh: one line per
thread count, explicit-mask attention, foreach AdamW. With --device cuda it is what a user would
run instead of Strata on an H100/H200: bf16 autocast over fp32 master weights, TF32 for the fp32
rest, scaled_dot_product_attention, fused AdamW, eager then torch.compile (one line per mode, a
failed mode a line with "error"), random tokens drawn on the device, and MFU against the card's
dense bf16 peak from tools/gpu_peaks.h.

Usage: bench_torch.py [--n-layer 4 --n-head 4 --d-model 256 --seq-len 256 --vocab 2048
                       --micro-batch 8 --steps 20 --warmup 3 --threads 1,2]
       bench_torch.py --device cuda --config configs/gpt2_124m.yaml [--micro-batch auto]
                      [--modes eager,compile] [--dtype bf16|fp32] [--peak-tflops 989]
Shape flags given explicitly override --config (model.* and train.micro_batch); --sdpa/--no-sdpa
picks the attention on either device (default: explicit mask on cpu, SDPA on cuda).
"""
import argparse
import contextlib
import gc
import json
import math
import pathlib
import re
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

DEFAULTS = {"n_layer": 4, "n_head": 4, "d_model": 256, "seq_len": 256, "vocab": 2048,
            "micro_batch": 8}
# The block's architecture, Strata's model.* keys of model/gpt_architecture.h with their defaults
# (GPT-2's); --config sets them (docs/ARCHITECTURE.md §3 `model`, §5 "The block's architecture").
ARCH = {"norm": "layernorm", "norm_eps": 1e-5, "mlp": "gelu", "d_ff": 0, "ffn_multiple_of": 256,
        "position": "learned", "rope_theta": 10000.0, "kv_heads": 0, "bias": True,
        "tie_embeddings": True}
ARCH_WORDS = {"norm": ("layernorm", "rmsnorm"), "mlp": ("gelu", "swiglu"),
              "position": ("learned", "rope")}


def ffn_width(d_model, arch):
    """The MLP's hidden width F: d_ff, else 4C for GELU and ⌊8C/3⌋ rounded up to a multiple of
    ffn_multiple_of for SwiGLU (GptShape::ffn_width)."""
    if arch["d_ff"] > 0:
        return arch["d_ff"]
    if arch["mlp"] == "gelu":
        return 4 * d_model
    multiple = arch["ffn_multiple_of"]
    return (8 * d_model // 3 + multiple - 1) // multiple * multiple


def model_arch(model):
    """The architecture of a config's `model` section (its other keys are ignored), checked as
    Strata's config check does where this model depends on it; a ValueError says what is wrong."""
    if model.get("moe", {}).get("experts", 0):
        raise ValueError("model.moe: this reference has no mixture of experts")
    arch = dict(ARCH)
    for key, default in ARCH.items():
        if key not in model:
            continue
        value = model[key]
        if key in ARCH_WORDS and value not in ARCH_WORDS[key]:
            raise ValueError(f"model.{key} is {value!r}, not one of {', '.join(ARCH_WORDS[key])}")
        if isinstance(default, bool) != isinstance(value, bool):
            raise ValueError(f"model.{key} is {value!r}, expected true or false")
        arch[key] = type(default)(value)
    return arch


def check_shape(cfg, arch):
    """The shape's own rules that this model needs (a ValueError otherwise)."""
    n_head, d_model = cfg["n_head"], cfg["d_model"]
    if d_model % n_head:
        raise ValueError(f"d_model {d_model} is not a multiple of n_head {n_head}")
    kv_heads = arch["kv_heads"] or n_head
    if kv_heads < 0 or n_head % kv_heads:
        raise ValueError(f"model.kv_heads {arch['kv_heads']} does not divide n_head {n_head}")
    if arch["position"] == "rope" and (d_model // n_head) % 2:
        raise ValueError(f"model.position rope needs an even head size, not {d_model // n_head}")


def norm_layer(d_model, arch):
    """LayerNorm (biased variance, with or without its bias) or RMSNorm, y = x / √(mean(x²) + ε)
    · g (a gain, never a bias), both with model.norm_eps."""
    if arch["norm"] == "rmsnorm":
        return nn.RMSNorm(d_model, eps=arch["norm_eps"])
    return nn.LayerNorm(d_model, eps=arch["norm_eps"], bias=arch["bias"])


def rope_angles(seq_len, head_size, theta):
    """(T, hs) angles p·θ_j in fp64, θ_j = theta^(−2j/hs), channel j and j + hs/2 sharing θ_j
    (rotate-half pairing, model/kernels/rope.h)."""
    j = torch.arange(head_size // 2, dtype=torch.float64)
    angle = torch.arange(seq_len, dtype=torch.float64)[:, None] * theta ** (-2.0 * j / head_size)
    return torch.cat([angle, angle], dim=-1)


def rotate(x, cos, sin):
    """RoPE on x (B, H, T, hs): y_j = x_j·cos − x_{j+hs/2}·sin, y_{j+hs/2} = x_{j+hs/2}·cos +
    x_j·sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class Block(nn.Module):
    """A pre-norm block. qkv is one product of (n_head + 2·kv_heads)·hs rows, [all q | all k |
    all v] (Strata's fused attn.qkv, or its attn.q, .k, .v stacked); fc is C → F for GELU and
    the fused gate and up projections C → 2F for SwiGLU, gate rows first (Strata's mlp.fc)."""

    def __init__(self, d_model, n_head, arch=ARCH):
        super().__init__()
        self.n_head = n_head
        self.kv_heads = arch["kv_heads"] or n_head
        self.swiglu = arch["mlp"] == "swiglu"
        self.ffn = ffn_width(d_model, arch)
        head_size, bias = d_model // n_head, arch["bias"]
        self.ln1 = norm_layer(d_model, arch)
        self.qkv = nn.Linear(d_model, (n_head + 2 * self.kv_heads) * head_size, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)
        self.ln2 = norm_layer(d_model, arch)
        self.fc = nn.Linear(d_model, (2 if self.swiglu else 1) * self.ffn, bias=bias)
        self.fc_proj = nn.Linear(self.ffn, d_model, bias=bias)

    def forward(self, x, mask, rope=None):
        B, T, C = x.shape
        hs, NH, KV = C // self.n_head, self.n_head, self.kv_heads
        q, k, v = self.qkv(self.ln1(x)).split([NH * hs, KV * hs, KV * hs], dim=2)
        heads = lambda t: t.view(B, T, -1, hs).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        if rope is not None:  # (cos, sin) of positions 0 … T−1
            cos, sin = (r[:T].to(q.dtype) for r in rope)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if mask is None:  # SDPA: the flash / memory-efficient kernels, no T×T scores in memory
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               **({"enable_gqa": True} if KV != NH else {}))
        else:
            if KV != NH:  # query head h reads key/value head h // (NH / KV), as Llama's repeat_kv
                k, v = k.repeat_interleave(NH // KV, dim=1), v.repeat_interleave(NH // KV, dim=1)
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            scores = scores.masked_fill(mask[:T, :T], float("-inf"))
            y = F.softmax(scores, dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        h = self.fc(self.ln2(x))
        if self.swiglu:
            gate, up = h.split(self.ffn, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return x + self.fc_proj(h)


class Gpt(nn.Module):
    def __init__(self, n_layer, n_head, d_model, seq_len, vocab, sdpa, arch=ARCH):
        super().__init__()
        padded = (vocab + 127) // 128 * 128
        self.wte = nn.Embedding(padded, d_model)
        learned = arch["position"] == "learned"
        self.wpe = nn.Embedding(seq_len, d_model) if learned else None
        self.blocks = nn.ModuleList(Block(d_model, n_head, arch) for _ in range(n_layer))
        self.lnf = norm_layer(d_model, arch)
        self.lm_head = None if arch["tie_embeddings"] else nn.Linear(d_model, padded, bias=False)
        self.vocab = vocab
        mask = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", None if sdpa else mask)  # SDPA masks by itself
        # RoPE's cos and sin in fp64, cast to the activations' dtype where they are used.
        angles = None if learned else rope_angles(seq_len, d_model // n_head, arch["rope_theta"])
        self.register_buffer("rope_cos", None if learned else angles.cos(), persistent=False)
        self.register_buffer("rope_sin", None if learned else angles.sin(), persistent=False)
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if "proj" in name else 0.02
                nn.init.normal_(p, 0.0, std)

    def logits(self, idx):
        """(B, T, vocab): the real vocabulary's columns (padded rows are never targets)."""
        T = idx.shape[1]
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        rope = None if self.rope_cos is None else (self.rope_cos, self.rope_sin)
        for block in self.blocks:
            x = block(x, self.mask, rope)
        head = self.wte.weight if self.lm_head is None else self.lm_head.weight
        return (self.lnf(x) @ head.t())[..., : self.vocab]

    def forward(self, idx, targets):
        logits = self.logits(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def gpu_peak_tflops(device_name):
    """The dense bf16 TFLOP/s of the first entry of tools/gpu_peaks.h's kGpuPeaks that the
    device name matches, with the header's rule (every token a word of its own: not preceded by
    a letter or digit, not followed by a digit), so both sides divide by the same peak; None when
    the card (or the header) is unknown."""
    header = pathlib.Path(__file__).resolve().parent / "gpu_peaks.h"
    entry = re.compile(r'\{\{"(\w+)", (?:"(\w+)"|nullptr)\}, \{"([^"]+)", ([\d.]+), [\d.]+\}\}')
    name = device_name.upper()
    for match in entry.finditer(header.read_text() if header.exists() else ""):
        tokens = [t for t in match.group(1, 2) if t]
        if all(re.search(rf"(?<![A-Z0-9]){t}(?!\d)", name) for t in tokens):
            return float(match.group(4))
    return None


def measure(args, cfg, threads, compiled, micro_batch):
    """One benchmark run: a fresh model and optimizer, warm-up steps (torch.compile compiles in
    the first), then the median of `steps` timed steps. Returns the JSON record."""
    cuda = args.device == "cuda"
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(1234)
    model = Gpt(cfg["n_layer"], cfg["n_head"], cfg["d_model"], cfg["seq_len"], cfg["vocab"],
                args.sdpa, cfg["arch"]).to(args.device)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    # Fused AdamW (one kernel for all parameters) is the fast path on CUDA; foreach on the CPU.
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-4, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if cuda else {"foreach": True}))
    forward = torch.compile(model) if compiled else model
    tokens = torch.randint(0, cfg["vocab"], (micro_batch, cfg["seq_len"] + 1), device=args.device)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    # bf16 autocast: matmuls in bf16, master weights, reductions and the loss in fp32.
    autocast = (lambda: torch.autocast(args.device, dtype=torch.bfloat16)) \
        if args.dtype == "bf16" else contextlib.nullcontext
    sync = torch.cuda.synchronize if cuda else (lambda: None)  # kernels are asynchronous
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(args.warmup + args.steps):
        sync()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            loss = forward(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        sync()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    tokens_per_s = micro_batch * cfg["seq_len"] / step_s
    record = {"bench": "train_torch", "torch": torch.__version__}
    if not cuda:  # the CPU line of scripts/bench_cpu.sh, with its keys in their order
        record.update({"threads": threads, "micro_batch": micro_batch, "seq_len": cfg["seq_len"],
                       "steps": args.steps, "step_ms": round(1e3 * step_s, 2),
                       "tokens_per_s": round(tokens_per_s, 1), "peak_rss_mib": round(
                           resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)})
        if args.sdpa or compiled or args.dtype != "fp32":  # only off the reference path
            record.update({"dtype": args.dtype, "compile": compiled, "sdpa": args.sdpa})
        record.update(arch_record(cfg))
        return {**record, "final_loss": round(loss.item(), 4)}
    L, C, T = cfg["n_layer"], cfg["d_model"], cfg["seq_len"]
    # N as llm.c counts it (num_parameters, the N of its estimate_mfu): every unique parameter,
    # wte once with its padded rows, wpe, biases and LayerNorms included.
    N = sum(p.numel() for p in model.parameters())
    padding = model.wte.weight.shape[0] - cfg["vocab"]
    # Strata's N leaves out an untied wte: a lookup, no product (ARCHITECTURE §5 "Model FLOPs").
    lookup = 0 if model.lm_head is None else model.wte.weight.numel()
    peak = args.peak_tflops or gpu_peak_tflops(torch.cuda.get_device_name())
    mfu = lambda n, attn: round(tokens_per_s * (6 * n + attn * L * C * T) / (peak * 1e12), 4) \
        if peak else None
    record.update(common(args, cfg, compiled, micro_batch))
    record.update({"params": N, "params_unpadded": N - padding * C, "steps": args.steps,
                   "step_ms": round(1e3 * step_s, 2), "tokens_per_s": round(tokens_per_s, 1),
                   "mfu_llmc": mfu(N, 6),  # llm.c: 6N + 6LCT FLOPs per token
                   "mfu_contract": mfu(N - lookup, 12),  # Strata's: 6N + 12LCT per token
                   "peak_tflops": peak,
                   "device_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1),
                   "final_loss": round(loss.item(), 4)})
    return record


def common(args, cfg, compiled, micro_batch):
    return {"device": args.device, "device_name": torch.cuda.get_device_name(),
            "dtype": args.dtype, "compile": compiled, "sdpa": args.sdpa,
            "micro_batch": micro_batch, "seq_len": cfg["seq_len"], "n_layer": cfg["n_layer"],
            "d_model": cfg["d_model"], **arch_record(cfg)}


def arch_record(cfg):
    """The keys of the architecture that differ from GPT-2's (none for GPT-2: its lines are
    unchanged)."""
    changed = {k: v for k, v in cfg["arch"].items() if v != ARCH[k]}
    return {"arch": changed} if changed else {}


def run(args, cfg, threads, compiled):
    """measure(), halving the micro-batch on CUDA OOM under --micro-batch auto."""
    micro_batch = cfg["micro_batch"]
    while True:
        try:
            return measure(args, cfg, threads, compiled, micro_batch)
        except torch.cuda.OutOfMemoryError:
            if not args.auto_batch or micro_batch == 1:
                raise
        finally:
            if compiled and hasattr(torch, "_dynamo"):
                torch._dynamo.reset()  # drop the graphs (and their memory) of this run
        # Outside the except block the exception, and the frames holding the tensors, are gone.
        gc.collect()
        torch.cuda.empty_cache()
        micro_batch //= 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ["--n-layer", "--n-head", "--d-model", "--seq-len", "--vocab"]:
        default = DEFAULTS[flag[2:].replace("-", "_")]
        parser.add_argument(flag, type=int, help=f"default: --config's, else {default}")
    parser.add_argument("--micro-batch", type=lambda s: s if s == "auto" else int(s),
                        help="sequences per step (default: --config's, else 8), or auto: "
                        "--config's, halved on CUDA out-of-memory until it fits")
    parser.add_argument("--config", help="a configs/*.yaml: model.* and train.micro_batch")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", default="1,2", help="cpu: comma-separated thread counts")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], help="default: bf16 cuda, fp32 cpu")
    parser.add_argument("--sdpa", action=argparse.BooleanOptionalAction,
                        help="attention by F.scaled_dot_product_attention (default: on cuda)")
    parser.add_argument("--modes", default="auto",
                        help="comma-separated eager,compile (default: eager on cpu, both on cuda)")
    parser.add_argument("--peak-tflops", type=float, help="dense bf16 peak (default: gpu_peaks.h)")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    cfg = dict(DEFAULTS, arch=dict(ARCH))
    if args.config:
        import yaml  # only --config needs PyYAML
        with open(args.config) as f:
            doc = yaml.safe_load(f)
        model = {"vocab" if k == "vocab_size" else k: v for k, v in doc.get("model", {}).items()}
        cfg.update({k: model[k] for k in DEFAULTS if k in model})
        cfg["micro_batch"] = doc.get("train", {}).get("micro_batch", cfg["micro_batch"])
        try:
            cfg["arch"] = model_arch(doc.get("model", {}))
        except ValueError as e:
            sys.exit(f"error: --config {args.config}: {e}")
    args.auto_batch = args.micro_batch == "auto"
    if args.micro_batch and not args.auto_batch:
        cfg["micro_batch"] = args.micro_batch
    cfg.update({k: getattr(args, k) for k in DEFAULTS
                if k != "micro_batch" and getattr(args, k) is not None})
    try:
        check_shape(cfg, cfg["arch"])
    except ValueError as e:
        sys.exit(f"error: {e}")
    args.dtype = args.dtype or ("bf16" if cuda else "fp32")
    args.sdpa = cuda if args.sdpa is None else args.sdpa
    modes = args.modes if args.modes != "auto" else "eager,compile" if cuda else "eager"
    modes = modes.split(",")
    if set(modes) - {"eager", "compile"}:
        sys.exit(f"error: --modes takes eager and/or compile, not {args.modes}")
    if args.auto_batch and not cuda:
        sys.exit("error: --micro-batch auto needs --device cuda")
    if cuda and not torch.cuda.is_available():
        sys.exit(f"error: --device cuda but torch {torch.__version__} sees no CUDA device "
                 f"(built with CUDA {torch.version.cuda})")
    if args.sdpa and not hasattr(F, "scaled_dot_product_attention"):
        sys.exit(f"error: --sdpa needs torch >= 2.0, this is {torch.__version__}")
    if cuda:
        # TF32 for what autocast leaves in fp32 (and all of --dtype fp32), as a user would.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    failed = runs = 0
    for threads in ([None] if cuda else [int(t) for t in args.threads.split(",")]):
        for mode in modes:
            runs += 1
            try:
                record = run(args, cfg, threads, mode == "compile")
            except Exception as e:  # a failed mode (compiler, triton, OOM) must not hide the rest
                failed += 1
                message = (str(e).strip().splitlines() or [""])[0][:300]
                record = {"bench": "train_torch", "torch": torch.__version__}
                record.update(common(args, cfg, mode == "compile", cfg["micro_batch"]) if cuda
                              else {"threads": threads, "compile": mode == "compile"})
                record["error"] = f"{type(e).__name__}: {message}"
            print(json.dumps(record), flush=True)
    sys.exit(1 if failed == runs else 0)


if __name__ == "__main__":
    main()

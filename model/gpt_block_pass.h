// The GPT block's passes, written once for both backends (docs/ARCHITECTURE.md §5): GptBlock<Ops,
// Moe> runs one transformer block's forward, its attention core (what selective recomputation
// reruns), the input half of its backward (recomputation, the stash copies, the activation
// gradients) and its weight half, through an ops object (model/ops/ops.h: CpuOps<T> or
// CudaOps<T>) and an MoE layer (MoeLayer<T> or CudaMoeLayer<T>). The models' storage
// (GptStorage, model/gpt_storage.h) hands it views: one block's activations
// (BlockActivations), one layer of a weight stash (StashLayer), the block's weights and gradients
// (BlockTensors), the shared buffers (GptBlockBuffers).
//
// Per block, N = B·T rows, Nl of them this rank's residual rows (N / tp with sequence
// parallelism), Cl = C / tp channels of this rank's q heads, Hl = F / tp of its MLP columns:
//   ln1 = norm(x) → [gather rows] → qkv (column-parallel) → [RoPE] → attention → proj
//   (row-parallel) → [sum] → x2 = x + · + b and ln2 = norm(x2) (one op) → [gather rows] →
//   fc with bias and GELU, or fc (gate and up) then SwiGLU → proj → [sum] → out = x2 + · + b
// or, in an MoE block, the MLP's line is the experts: [gather rows] → moe(ln2) → [sum] → out.
// The norm is LayerNorm or RMSNorm (GptNorm), biases are null in a model without them, and with
// grouped-query attention qkv holds NHl q heads and KVl k and v heads (model/gpt_architecture.h).
// "[sum]" and "[gather rows]" are the ops' row collectives (gpt.h). The ops round their outputs,
// so nothing here rounds, copies by hand or knows the device.
#pragma once

#include <cstddef>

#include <string>

#include "model/context_attention.h"
#include "model/core/context_chunks.h"
#include "model/core/error.h"
#include "model/fp8/fp8_state.h"
#include "model/gpt_norm.h"
#include "model/gpt_shape.h"
#include "model/moe/moe_layer.h"
#include "model/ops/ops.h"
#include "model/parameter_layout.h"
#include "model/recompute.h"

namespace strata {

// One block's activations: pointers into where the model keeps them (a slot's per-layer arrays)
// or, for what recomputation drops, its one-layer workspace. V: the values' type, S: the
// statistics', A: the MoE layer's activations.
template <class V, class S, class A>
struct BlockActivations {
  const V* x = nullptr;  // block input (Nl, C): the residual stream, always kept
  V* out = nullptr;      // block output (Nl, C)
  V *ln1 = nullptr, *x2 = nullptr, *ln2 = nullptr;  // (Nl, C)
  V *ln1_full = nullptr, *ln2_full = nullptr;       // (N, C) gathered; null without sequence par.
  S *ln1_mean = nullptr, *ln1_rstd = nullptr, *ln2_mean = nullptr, *ln2_rstd = nullptr;  // (Nl)
  V *fch = nullptr, *fch_gelu = nullptr;  // (N, Hl) the fc output and its GELU; null: MoE block
  V *qkv = nullptr, *atty = nullptr;      // (N, 3Cl), (N, Cl)
  S* lse = nullptr;  // (B, NHl, T) attention statistics, where the ops keep them (kLsePerRow)
  // KV-cache decoding (one sequence): qkv is the layer's cache (seq_len rows), the N new rows
  // written at rows [cache_begin, cache_begin + N), each attending over all rows before it; −1:
  // none (training's passes).
  int cache_begin = -1;
  A* moe = nullptr;  // an MoE block's experts (kept in the slot under every recompute); else null
  // All N rows of the LayerNorm outputs: the gathered copy, or the rows themselves.
  V* ln1_rows(bool sequence_parallel) const { return sequence_parallel ? ln1_full : ln1; }
  V* ln2_rows(bool sequence_parallel) const { return sequence_parallel ? ln2_full : ln2; }
};

// One layer of what the backward's input half leaves for its weight half (docs/ARCHITECTURE.md §5,
// the split backward): the activation gradients the weight gradients are computed from, and
// copies of the activations they read that recomputation dropped (null where not copied: the
// fused backward's stash, or what the slot keeps). An MoE block's layer has no dfch nor fch_gelu
// (its experts' gradients stay in its activations).
template <class V, class S>
struct StashLayer {
  V *dz = nullptr, *dy = nullptr;  // (N, C) gradients of the MLP's, attention's projection outputs
  V* dfch = nullptr;               // (N, Hl) of the fc output (before GELU)
  V* dqkv = nullptr;               // (N, 3Cl)
  V *dln1 = nullptr, *dln2 = nullptr;  // (Nl, C) of the LayerNorm outputs
  // Copies: atty (selective and full recompute), the rest (full only).
  V* atty = nullptr;                           // (N, Cl)
  V* x2 = nullptr;                             // (Nl, C)
  V *ln1_full = nullptr, *ln2_full = nullptr;  // (N, C) all rows of the LayerNorm outputs
  V* fch_gelu = nullptr;                       // (N, Hl)
  S *ln1_mean = nullptr, *ln1_rstd = nullptr, *ln2_mean = nullptr, *ln2_rstd = nullptr;  // (Nl)
};

// Where one block's tensors sit in its segment: offsets from the segment's first element, found
// by name once (ParameterLayout), −1 for the tensors the block does not have (an MoE block's
// router stands where a dense block's MLP does; a model without biases has none; RMSNorm has no
// bias). Grouped-query attention's q, k and v weights (and biases) are adjacent tensors: the
// offsets of q's are those of the fused [q | k | v] product's (ParameterLayout::for_partition).
struct BlockOffsets {
  std::ptrdiff_t ln1_weight, ln1_bias, qkv_weight, qkv_bias, attn_proj_weight, attn_proj_bias;
  std::ptrdiff_t ln2_weight, ln2_bias, fc_weight, fc_bias, mlp_proj_weight, mlp_proj_bias;
  std::ptrdiff_t router;
  // Block `layer` (a global index) of `layout`, in `segment`; `moe`: an MoE block.
  static BlockOffsets of(const ParameterLayout& layout, const ParameterSegment& segment, int layer,
                         bool moe) {
    const std::string h = "h." + std::to_string(layer) + ".";
    auto at = [&](const std::string& name) {
      if (!layout.has(h + name)) return std::ptrdiff_t{-1};
      return static_cast<std::ptrdiff_t>(layout.at(h + name).offset - segment.range.begin);
    };
    auto mlp = [&](const char* name) { return moe ? std::ptrdiff_t{-1} : at(name); };
    // The fused product's weight or bias: one tensor, or q's followed by k's and v's.
    auto qkv = [&](const char* kind) {
      if (layout.has(h + "attn.qkv." + kind)) return at(std::string("attn.qkv.") + kind);
      const std::ptrdiff_t q = at(std::string("attn.q.") + kind);
      if (q >= 0) {
        const TensorView& qt = layout.at(h + "attn.q." + kind);
        const TensorView& kt = layout.at(h + "attn.k." + kind);
        const TensorView& vt = layout.at(h + "attn.v." + kind);
        STRATA_CHECK(kt.offset == qt.offset + qt.size && vt.offset == kt.offset + kt.size,
                     "the q, k and v ", kind, " of block ", layer, " are not adjacent");
      }
      return q;
    };
    return {at("ln1.weight"),
            at("ln1.bias"),
            qkv("weight"),
            qkv("bias"),
            at("attn.proj.weight"),
            at("attn.proj.bias"),
            at("ln2.weight"),
            at("ln2.bias"),
            mlp("mlp.fc.weight"),
            mlp("mlp.fc.bias"),
            mlp("mlp.proj.weight"),
            mlp("mlp.proj.bias"),
            moe ? at("moe.router.weight") : std::ptrdiff_t{-1}};
  }
};

// A block's tensors in a segment of weights (P = const Value) or gradients (P = Grad) that starts
// at `base`.
template <class P>
struct BlockTensors {
  P *ln1_weight, *ln1_bias, *qkv_weight, *qkv_bias, *attn_proj_weight, *attn_proj_bias;
  P *ln2_weight, *ln2_bias, *fc_weight, *fc_bias, *mlp_proj_weight, *mlp_proj_bias;
  P* router;
  BlockTensors(P* base, const BlockOffsets& o)
      : ln1_weight(at(base, o.ln1_weight)),
        ln1_bias(at(base, o.ln1_bias)),
        qkv_weight(at(base, o.qkv_weight)),
        qkv_bias(at(base, o.qkv_bias)),
        attn_proj_weight(at(base, o.attn_proj_weight)),
        attn_proj_bias(at(base, o.attn_proj_bias)),
        ln2_weight(at(base, o.ln2_weight)),
        ln2_bias(at(base, o.ln2_bias)),
        fc_weight(at(base, o.fc_weight)),
        fc_bias(at(base, o.fc_bias)),
        mlp_proj_weight(at(base, o.mlp_proj_weight)),
        mlp_proj_bias(at(base, o.mlp_proj_bias)),
        router(at(base, o.router)) {}

 private:
  static P* at(P* base, std::ptrdiff_t offset) { return offset < 0 ? nullptr : base + offset; }
};

// The buffers every block's passes share (one micro-batch at a time).
template <class V>
struct GptBlockBuffers {
  V* partial;  // (N, C) a row-parallel layer's output before [sum]
  V* reduced;  // (Nl, C) its sum with sequence parallelism
  V* dres;     // (Nl, C) the running gradient of the residual stream
  V* dln;      // (N, C) a LayerNorm output's partial gradient before its reduce-scatter (sequence
               // parallelism; without it the partial sums are added in place, in the stash)
  V* datty;    // (N, Cl) the attention output's gradient
  V* dact;     // (N, Hl) the SwiGLU output's gradient (null for GELU)
};

// The shape of this rank's block.
struct GptBlockDims {
  int C = 0, Cl = 0, Hl = 0, NHl = 0;  // channels: all, this rank's heads', its MLP columns
  int KVl = 0, head_size = 0;          // this rank's key/value heads, and their size
  int qkv = 0;                         // the q, k, v product's width: (NHl + 2·KVl)·head_size
  int fc = 0;                          // the fc product's: Hl, or SwiGLU's 2·Hl (gate and up)
  int tp_rank = 0, tp_size = 1;
  bool sequence_parallel = false;  // rows split over the tensor-parallel group
  int experts = 0;                 // of an MoE block (MoeTotals), 0 without
  Norm norm = Norm::layernorm;
  double norm_eps = 1e-5;
  bool swiglu = false;
  bool rope = false;
  double rope_theta = 10000.0;
  ContextChunks context;  // the rows of each sequence this rank holds (context parallelism)
  GptBlockDims(const GptShape& shape, const ModelPartition& partition)
      : C(shape.d_model),
        Cl(shape.d_model / partition.tp_size),
        Hl(shape.ffn_width() / partition.tp_size),
        NHl(shape.n_head / partition.tp_size),
        KVl(shape.kv_head_count() / partition.tp_size),
        head_size(shape.head_size()),
        qkv(shape.qkv_width() / partition.tp_size),
        fc(shape.fc_width() / partition.tp_size),
        tp_rank(partition.tp_rank),
        tp_size(partition.tp_size),
        sequence_parallel(partition.sequence_parallel && partition.tp_size > 1),
        experts(shape.moe.enabled() ? shape.moe.experts : 0),
        norm(shape.arch.norm),
        norm_eps(shape.arch.norm_eps),
        swiglu(shape.arch.mlp == MlpKind::swiglu),
        rope(shape.arch.position == Position::rope),
        rope_theta(shape.arch.rope_theta),
        context(partition.context) {}
  int rows(int N) const { return sequence_parallel ? N / tp_size : N; }
  // The q and k heads of B sequences of T rows of the qkv product whose row t has position
  // t + position_offset.
  RopeLayout rope_layout(int B, int T, int position_offset) const {
    return rope_qk_layout(B, T, NHl, KVl, head_size, position_offset, rope_theta);
  }
};

// One block's passes; a view over the model's ops, MoE layer (null without experts) and buffers,
// made for the calls at hand (it owns nothing).
template <class Ops, class Moe>
class GptBlock {
 public:
  using Value = typename Ops::Value;
  using Stat = typename Ops::Stat;
  using Grad = typename Ops::Grad;
  using Scalar = typename Ops::Scalar;
  using Activations = BlockActivations<Value, Stat, typename Moe::Activations>;
  using Stash = StashLayer<Value, Stat>;
  using Weights = BlockTensors<const Value>;
  using Grads = BlockTensors<Grad>;

  // `context`: attention across the context-parallel group (null without one). `fp8`: the model's
  // FP8 scaling state (null: every GEMM in the compute dtype), `layer` this block's index in it.
  GptBlock(Ops& ops, Moe* moe, ContextAttention<Ops>* context, const GptBlockDims& dims,
           Recompute recompute, const GptBlockBuffers<Value>& buffers, Fp8State* fp8 = nullptr,
           int layer = 0)
      : ops_(ops),
        moe_(moe),
        context_(context),
        d_(dims),
        recompute_(recompute),
        b_(buffers),
        fp8_(fp8),
        layer_(layer) {}

  // x → out for B sequences of T_ positions.
  void forward(const Activations& a, int B, int T_, const Weights& p) {
    const int C = d_.C, N = B * T_, Nl = d_.rows(N);
    // Attention: x2 = x + [sum](proj(attn(qkv(ln1(x))))) + b, then ln2 = norm(x2) in the same op.
    norm().forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.x, p.ln1_weight, p.ln1_bias, Nl, C,
                   fp8(Fp8Layer::qkv));
    attention_core_forward(a, B, T_, p, ops_.gather_rows(a.ln1, a.ln1_full, N, C));
    ops_.matmul_forward(b_.partial, nullptr, a.atty, p.attn_proj_weight, nullptr, N, d_.Cl, C,
                        Epilogue::bias, fp8(Fp8Layer::attn_proj));
    const Value* y = ops_.sum_rows(b_.partial, b_.reduced, N, C);  // (Nl, C)
    norm().residual_forward(a.x2, a.ln2, a.ln2_mean, a.ln2_rstd, a.x, y, p.attn_proj_bias,
                            p.ln2_weight, p.ln2_bias, Nl, C,
                            a.moe != nullptr ? Fp8Gemm{} : fp8(Fp8Layer::mlp_fc));
    const Value* ln2_full = ops_.gather_rows(a.ln2, a.ln2_full, N, C);
    if (a.moe != nullptr) {
      // The experts: out = x2 + [sum](moe(ln2)), their proj biases inside (model/moe/).
      moe_->forward(*a.moe, ln2_full, N, T_, p.router, b_.partial);
      const Value* z = ops_.sum_rows(b_.partial, b_.reduced, N, C);
      ops_.residual_bias_forward(a.out, a.x2, z, nullptr, Nl, C);
      return;
    }
    // MLP: out = x2 + [sum](proj(act(fc(ln2)))) + b. GELU: the fc bias added after its product,
    // with the GELU (Epilogue::bias_gelu). SwiGLU: fch holds [gate | up] (N, 2Hl), fch_gelu
    // silu(gate)·up (N, Hl).
    if (d_.swiglu) {
      ops_.matmul_forward(a.fch, nullptr, ln2_full, p.fc_weight, p.fc_bias, N, C, d_.fc,
                          Epilogue::bias, fp8(Fp8Layer::mlp_fc));
      ops_.swiglu_forward(a.fch_gelu, a.fch, N, d_.Hl);
    } else {
      ops_.matmul_forward(a.fch_gelu, a.fch, ln2_full, p.fc_weight, p.fc_bias, N, C, d_.Hl,
                          Epilogue::bias_gelu, fp8(Fp8Layer::mlp_fc));
    }
    ops_.matmul_forward(b_.partial, nullptr, a.fch_gelu, p.mlp_proj_weight, nullptr, N, d_.Hl, C,
                        Epilogue::bias, fp8(Fp8Layer::mlp_proj));
    const Value* z = ops_.sum_rows(b_.partial, b_.reduced, N, C);
    ops_.residual_bias_forward(a.out, a.x2, z, p.mlp_proj_bias, Nl, C);
  }

  // ln1 (all N rows) → qkv (N, qkv) → [RoPE on q and k] → attention output (N, Cl): what
  // selective recomputation reruns (from the kept ln1 rows, no communication), one function for
  // both.
  void attention_core_forward(const Activations& a, int B, int T_, const Weights& p,
                              const Value* ln1_full) {
    const int N = B * T_;
    if (a.cache_begin >= 0) {  // decoding: the new rows into the cache, attending over it
      const int t0 = a.cache_begin;
      Value* rows = a.qkv + static_cast<std::size_t>(t0) * d_.qkv;
      ops_.matmul_forward(rows, nullptr, ln1_full, p.qkv_weight, p.qkv_bias, N, d_.C, d_.qkv,
                          Epilogue::bias, fp8(Fp8Layer::qkv));
      if (d_.rope) ops_.rope_forward(rows, d_.rope_layout(1, N, t0));
      ops_.attention_forward_rows(a.atty, a.qkv, t0, t0 + N, d_.Cl, d_.NHl, d_.KVl);
      return;
    }
    ops_.matmul_forward(a.qkv, nullptr, ln1_full, p.qkv_weight, p.qkv_bias, N, d_.C, d_.qkv,
                        Epilogue::bias, fp8(Fp8Layer::qkv));
    if (d_.rope) turn(a.qkv, B, T_, true);
    if (context_ != nullptr) {
      context_->forward(a.atty, a.lse, a.qkv, B, T_, heads());
      return;
    }
    ops_.attention_forward(a.atty, a.lse, a.qkv, B, T_, d_.Cl, d_.NHl, d_.KVl);
  }

  // The input half: the recomputation of what the forward dropped (by the forward's own code on
  // the same inputs), copies into `stash` of what the weight half reads and the workspace will
  // lose (where `stash` has room for them), then b_.dres from d(loss)/d(block output) down to
  // d(loss)/d(block input), the gradients the weight half reads going to `stash`. An MoE block's
  // router losses take loss_scale like the cross-entropy, and its routing figures are added into
  // `moe_totals` (MoeTotals) at `layer`.
  void backward_input(const Activations& a, const Stash& stash, const Weights& p, int B, int T_,
                      Scalar loss_scale, double* moe_totals, int layer) {
    const int C = d_.C, N = B * T_, Nl = d_.rows(N);
    const bool sp = d_.sequence_parallel;
    if (recompute_ == Recompute::full)
      forward(a, B, T_, p);
    else if (recompute_ == Recompute::selective)
      attention_core_forward(a, B, T_, p, a.ln1_rows(sp));
    const std::size_t rows = static_cast<std::size_t>(Nl) * C, full = std::size_t{1} * N * C;
    keep(stash.atty, a.atty, std::size_t{1} * N * d_.Cl);
    keep(stash.x2, a.x2, rows);
    keep(stash.ln1_full, a.ln1_rows(sp), full);
    keep(stash.ln2_full, a.ln2_rows(sp), full);
    if (a.moe == nullptr) keep(stash.fch_gelu, a.fch_gelu, std::size_t{1} * N * d_.Hl);
    keep(stash.ln1_mean, a.ln1_mean, Nl);
    keep(stash.ln1_rstd, a.ln1_rstd, Nl);
    keep(stash.ln2_mean, a.ln2_mean, Nl);
    keep(stash.ln2_rstd, a.ln2_rstd, Nl);
    // Row-parallel partial sums: added in place when rows are not split, else reduce-scattered.
    auto partial_of = [&](Value* local) { return sp ? b_.dln : local; };

    // MLP: out = x2 + [sum](proj(h)) + b, h = act(fch); dres is d(loss)/d(out). Or the experts.
    ops_.gather_rows_into(b_.dres, stash.dz, N, C);  // (N, C)
    Value* dln2_partial = partial_of(stash.dln2);
    if (a.moe != nullptr) {
      moe_->backward_input(*a.moe, stash.dz, loss_scale, p.router, dln2_partial);
      MoeTotals::add(moe_totals, layer, d_.experts, a.moe->stats);
    } else {
      if (d_.swiglu) {
        ops_.matmul_backward_input(b_.dact, stash.dz, p.mlp_proj_weight, nullptr, N, d_.Hl, C,
                                   fp8(Fp8Layer::mlp_proj));
        ops_.swiglu_backward(stash.dfch, b_.dact, a.fch, N, d_.Hl);
      } else {
        ops_.matmul_backward_input(stash.dfch, stash.dz, p.mlp_proj_weight, a.fch, N, d_.Hl, C,
                                   fp8(Fp8Layer::mlp_proj));  // GELU' with it
      }
      ops_.matmul_backward_input(dln2_partial, stash.dfch, p.fc_weight, nullptr, N, C, d_.fc,
                                 fp8(Fp8Layer::mlp_fc));
    }
    ops_.sum_rows(dln2_partial, stash.dln2, N, C);  // (Nl, C)
    norm().backward_input(b_.dres, stash.dln2, a.x2, p.ln2_weight, a.ln2_mean, a.ln2_rstd, Nl, C);

    // Attention: x2 = x + [sum](proj(atty)) + b; dres is now d(loss)/d(x2).
    ops_.gather_rows_into(b_.dres, stash.dy, N, C);
    ops_.matmul_backward_input(b_.datty, stash.dy, p.attn_proj_weight, nullptr, N, d_.Cl, C,
                               fp8(Fp8Layer::attn_proj));
    attention_backward(stash.dqkv, a, B, T_);
    if (d_.rope) turn(stash.dqkv, B, T_, false);  // dq, dk turned back
    Value* dln1_partial = partial_of(stash.dln1);
    ops_.matmul_backward_input(dln1_partial, stash.dqkv, p.qkv_weight, nullptr, N, C, d_.qkv,
                               fp8(Fp8Layer::qkv));
    ops_.sum_rows(dln1_partial, stash.dln1, N, C);
    norm().backward_input(b_.dres, stash.dln1, a.x, p.ln1_weight, a.ln1_mean, a.ln1_rstd, Nl, C);
  }

  // The activations the weight half reads: `a` (the slot's, or the workspace the fused
  // backward's recomputation just filled), with the stash's copies where it has them.
  static Activations weight_inputs(Activations a, const Stash& stash, bool sequence_parallel) {
    auto from_stash = [](auto*& at, auto* copy) {
      if (copy != nullptr) at = copy;
    };
    from_stash(a.atty, stash.atty);
    from_stash(a.x2, stash.x2);
    from_stash(sequence_parallel ? a.ln1_full : a.ln1, stash.ln1_full);
    from_stash(sequence_parallel ? a.ln2_full : a.ln2, stash.ln2_full);
    from_stash(a.fch_gelu, stash.fch_gelu);
    from_stash(a.ln1_mean, stash.ln1_mean);
    from_stash(a.ln1_rstd, stash.ln1_rstd);
    from_stash(a.ln2_mean, stash.ln2_mean);
    from_stash(a.ln2_rstd, stash.ln2_rstd);
    return a;
  }

  // The weight half: every parameter gradient of the block added (+=) into `g`, from `in`
  // (weight_inputs) and the stash's gradients. A row-parallel layer's bias (and the router) is
  // replicated: each rank adds its own rows' share (all rows without sequence parallelism),
  // found at their place among the gathered rows.
  void backward_weight(const Activations& in, const Stash& stash, const Grads& g, int N) {
    const int C = d_.C, Nl = d_.rows(N);
    const bool sp = d_.sequence_parallel;
    const RowRange own_rows{sp ? d_.tp_rank * Nl : 0, Nl};
    if (in.moe != nullptr) {
      moe_->backward_weight(*in.moe, in.ln2_rows(sp), g.router, own_rows.begin, own_rows.count);
    } else {
      ops_.matmul_backward_weight_rows(g.mlp_proj_weight, g.mlp_proj_bias, stash.dz, in.fch_gelu, N,
                                       d_.Hl, C, own_rows, fp8(Fp8Layer::mlp_proj));
      ops_.matmul_backward_weight(g.fc_weight, g.fc_bias, stash.dfch, in.ln2_rows(sp), N, C, d_.fc,
                                  fp8(Fp8Layer::mlp_fc));
    }
    norm().backward_weight(g.ln2_weight, g.ln2_bias, stash.dln2, in.x2, in.ln2_mean, in.ln2_rstd,
                           Nl, C);
    ops_.matmul_backward_weight_rows(g.attn_proj_weight, g.attn_proj_bias, stash.dy, in.atty, N,
                                     d_.Cl, C, own_rows, fp8(Fp8Layer::attn_proj));
    ops_.matmul_backward_weight(g.qkv_weight, g.qkv_bias, stash.dqkv, in.ln1_rows(sp), N, C, d_.qkv,
                                fp8(Fp8Layer::qkv));
    norm().backward_weight(g.ln1_weight, g.ln1_bias, stash.dln1, in.x, in.ln1_mean, in.ln1_rstd, Nl,
                           C);
  }

 private:
  GptNorm<Ops> norm() const { return {ops_, d_.norm, d_.norm_eps}; }
  // GEMM `gemm` of this block in FP8, where the model's recipe runs it so; else in the compute
  // dtype. The projections are row-parallel, qkv and fc column-parallel.
  Fp8Gemm fp8(Fp8Layer gemm) const {
    if (fp8_ == nullptr || !fp8_->runs(layer_, gemm)) return {};
    return {fp8_, layer_, gemm, gemm == Fp8Layer::attn_proj || gemm == Fp8Layer::mlp_proj};
  }
  typename ContextAttention<Ops>::Heads heads() const { return {d_.NHl, d_.KVl, d_.head_size}; }

  // RoPE (forward: the turn; else its transpose) on the q and k heads of B sequences of T_ rows
  // of qkv (or of their gradients): each half of a context-parallel member's rows at its chunk's
  // positions (model/core/context_chunks.h), one call for each.
  void turn(Value* qkv, int B, int T_, bool forward) {
    auto apply = [&](Value* rows, const RopeLayout& layout) {
      if (forward)
        ops_.rope_forward(rows, layout);
      else
        ops_.rope_backward(rows, layout);
    };
    if (!d_.context.split()) {
      apply(qkv, d_.rope_layout(B, T_, 0));
      return;
    }
    const int Tc = T_ / 2;
    for (int half = 0; half < 2; ++half) {
      RopeLayout layout =
          d_.rope_layout(B, Tc, static_cast<int>(d_.context.first_position(half, T_)));
      layout.sequence_rows = T_;
      apply(qkv + static_cast<std::size_t>(half) * Tc * d_.qkv, layout);
    }
  }

  // dqkv from b_.datty: attention's backward, across the context-parallel group where there is
  // one.
  void attention_backward(Value* dqkv, const Activations& a, int B, int T_) {
    if (context_ != nullptr) {
      context_->backward(dqkv, b_.datty, a.qkv, a.atty, a.lse, B, T_, heads());
      return;
    }
    ops_.attention_backward(dqkv, b_.datty, a.qkv, a.atty, a.lse, B, T_, d_.Cl, d_.NHl, d_.KVl);
  }
  // A copy into the stash, where it has room for one.
  template <class U>
  void keep(U* to, const U* from, std::size_t n) {
    if (to != nullptr) ops_.copy(to, from, n);
  }

  Ops& ops_;
  Moe* moe_;
  ContextAttention<Ops>* context_;
  GptBlockDims d_;
  Recompute recompute_;
  GptBlockBuffers<Value> b_;
  Fp8State* fp8_;  // null: no FP8 GEMMs
  int layer_;      // this block in fp8_
};

}  // namespace strata

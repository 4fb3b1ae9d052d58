// Incremental decoding on the CPU model: the forward pass of one sequence run a few positions at a
// time, each new position attending over the keys and values cached for the earlier ones, so a
// generated token costs one position's work instead of the whole window's (Gpt::forward).
//
// The cache holds, per layer, the packed qkv rows (docs/ARCHITECTURE.md §5: all q, then all k, then
// all v; heads contiguous) that Gpt's forward computes for the same positions: (L, seq_len,
// qkv_width), 3C with multi-head attention and (n_head + 2·kv_heads)·head_size with grouped-query
// attention, whose cache is that much smaller per position.
// Rows [0, length()) hold the sequence so far. The q third of a cached row is not read again;
// keeping the packed rows lets the qkv GEMM write new rows straight into the cache and the
// attention read them as Gpt's forward does (attention_forward_rows beside attention_forward).
//
// Each block runs through the training passes' own code, GptBlock::forward (model/gpt_block_pass.h,
// with BlockActivations::cache_begin), over a CpuOps in fp32; the embedding and the head are the
// same ops on the new rows (the head on the last row alone).
//
// Cached keys and values belong to their positions (learned wpe added to the embedding, or rotary
// embeddings already turning the cached keys): a window that moves cannot shift the cache, it is
// rebuilt by reset() and one append of the new window (a prefill). The decoder computes in T
// throughout, without the mixed-precision rounding of GptOptions::compute (the tools load fp32
// models). Same numbers as Gpt::forward up to the order of floating-point sums inside GEMMs of
// other shapes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/gpt.h"
#include "model/moe/moe_layer.h"

namespace strata {

template <class T>
class GptDecoder {
 public:
  // Decodes with the whole model `model` (one process: no tensor or pipeline parallelism, fp32
  // compute) and its parameters `params` in model.layout(). Neither is owned; both must outlive
  // the decoder.
  GptDecoder(const Gpt<T>& model, const T* params);

  // Positions cached so far, at most seq_len.
  int length() const { return length_; }
  // Forgets the cache: the next append starts at position 0.
  void reset() { length_ = 0; }
  // Runs `tokens` (n) at positions [length(), length() + n) through the model, each attending
  // causally over the cached positions and the new ones before it, caches their keys and values,
  // and returns the logits (padded_vocab) of the last of them; valid until the next append.
  // n >= 1 and length() + n <= seq_len; token ids must be < vocab_size.
  const T* append(const std::int32_t* tokens, int n);

 private:
  using Block = GptBlock<CpuOps<T>, MoeLayer<T>>;
  // Layer l's activations for the new rows: the work buffers, its cache.
  typename Block::Activations layer(int l);

  GptShape shape_;
  CpuOps<T> ops_;  // fp32: rounds nothing
  const T *wte_, *wpe_, *head_, *lnf_weight_, *lnf_bias_;
  std::vector<typename Block::Weights> blocks_;
  int length_ = 0;
  std::vector<T> qkv_cache_;  // (L, seq_len, qkv_width)
  // Work buffers for up to seq_len new rows (n of them used):
  std::vector<T> x_, x2_;          // (seq_len, C) residual stream entering a block, after attention
  std::vector<T> ln_;              // (seq_len, C) a LayerNorm's output
  std::vector<T> mean_, rstd_;     // (seq_len) its statistics (unused: no backward pass)
  std::vector<T> atty_, y_;        // (seq_len, C) attention output, a projection before its bias
  std::vector<T> fch_, fch_gelu_;  // (seq_len, fc_width), (seq_len, ffn_width)
  std::vector<T> logits_;          // (padded_vocab) of the last new row
  // MoE blocks route every new token dropless: in decoding no token competes for capacity.
  std::unique_ptr<MoeLayer<T>> moe_;
  MoeActivations<T> moe_rows_;
};

extern template class GptDecoder<float>;
extern template class GptDecoder<double>;

}  // namespace strata

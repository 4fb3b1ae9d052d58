// Named views into the flat parameter buffer. Parameters, gradients and optimizer moments share
// this layout, so bucketing, sharding and checkpoint slicing are index arithmetic.
// Names and shapes are the checkpoint contract of docs/ARCHITECTURE.md §5 (weights [out, in]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/core/context_chunks.h"
#include "model/core/element_range.h"
#include "model/gpt_shape.h"

namespace strata {

// Layers [begin, end) of the model.
struct LayerRange {
  int begin = 0, end = 0;
  bool operator==(const LayerRange&) const = default;
};

// Which part of the logical model one rank holds: a tensor-parallel shard (Megatron: heads and
// MLP columns split, vocabulary rows split, LayerNorms and row-parallel biases replicated) of the
// contiguous layer range of one pipeline stage; the first stage holds the embeddings, the last the
// final LayerNorm and the head (tied to wte, so with several stages both ends hold wte).
//
// With virtual pipeline stages (parallel.virtual_stages v > 1: the interleaved and zbv
// schedules, docs/ARCHITECTURE.md §2) a rank holds v chunks of layers, each a virtual stage of
// its own: [layer_begin, layer_end) is its chunk 0 and `later_chunks` its chunks 1 … v−1, in
// chunk order, which is also layer order under both placements. The embedding belongs to the
// chunk holding layer 0 (always chunk 0) and the head to the one ending at the last layer (always
// the last chunk); a rank holding both (zbv's rank 0) has the tied wte once, and both chunks add
// to its gradients. A model (Gpt, CudaGpt) computes one chunk: chunk(c).
//
// Expert parallelism (parallel.ep, docs/ARCHITECTURE.md §2) splits each MoE block's experts over
// the ep_size ranks of an expert-parallel group: this rank holds experts
// [ep_rank · E/ep_size, (ep_rank + 1) · E/ep_size) of every MoE block (each, under tensor
// parallelism, as its tp slice), named by their global index; everything else is as without it.
struct ModelPartition {
  int tp_rank = 0;
  int tp_size = 1;
  int layer_begin = 0;
  int layer_end = 0;
  bool has_embedding = true;
  bool has_head = true;
  // Activations outside attention/MLP (LayerNorm, residual) are sharded over the B·T rows.
  bool sequence_parallel = false;
  std::vector<LayerRange> later_chunks;
  int ep_rank = 0;
  int ep_size = 1;
  // Context parallelism (model/core/context_chunks.h): the rows of each sequence this rank holds.
  // Parameters are not split over it: it is a layout of the activations only.
  ContextChunks context;

  static ModelPartition whole(const GptShape& shape);
  int chunks() const { return 1 + static_cast<int>(later_chunks.size()); }
  LayerRange chunk_layers(int chunk) const;
  // The layers of every chunk.
  int layers() const;
  // Chunk `chunk` alone: its layers, the embedding if it is chunk 0 of a rank that has it, the
  // head if it is the last chunk of a rank that has it.
  ModelPartition chunk(int chunk) const;
  // The first of the experts this rank holds in each MoE block, and their number, of `experts`.
  int first_expert(int experts) const { return ep_rank * (experts / ep_size); }
  int experts_held(int experts) const { return experts / ep_size; }
  bool operator==(const ModelPartition&) const = default;
};

// Where a local tensor sits in its logical tensor: viewing the logical tensor as
// (outer, mid, inner), the local one is the (outer, mid_count, inner) block starting at
// mid_begin. E.g. the fused qkv weight (3C, C) is (3, C, C) and a rank holds its heads' rows of
// each of q, k and v; a row-parallel weight (C, 4C) is (C, 4C, 1) and a rank holds a column block.
struct TensorSlice {
  std::vector<std::int64_t> logical_shape;
  std::int64_t outer = 1, mid = 1, inner = 1;
  std::int64_t mid_begin = 0, mid_count = 1;

  bool is_whole() const { return mid_begin == 0 && mid_count == mid; }
  std::int64_t logical_size() const { return outer * mid * inner; }
  // Index in the logical (row-major) tensor of local element `local`.
  std::int64_t logical_index(std::int64_t local) const {
    const std::int64_t block = mid_count * inner;
    const std::int64_t o = local / block, rest = local % block;
    return o * mid * inner + mid_begin * inner + rest;
  }
};

struct TensorView {
  std::string name;                 // logical name, e.g. "h.0.attn.qkv.weight" (/model/<name>)
  std::vector<std::int64_t> shape;  // local shape, row-major
  std::size_t offset = 0;           // first element in the flat buffer
  std::size_t size = 0;             // number of elements
  bool decay = false;               // AdamW weight decay applies (2-D weights only)
  TensorSlice slice;                // where it sits in the logical tensor
};

// The unit in which a sharded run (ZeRO stages 2 and 3) gathers weights and reduces gradients:
// "wte", "wpe", one transformer block "h.<i>", or the final LayerNorm "lnf". Segments are
// contiguous in the layout and listed in layout order (wte first, so both pipeline ends shard it
// alike).
struct ParameterSegment {
  std::string name;
  ElementRange range;
};

// Where the named segments stand in a layout's segments(): -1 for those the partition lacks;
// blocks are consecutive from first_block.
struct SegmentIndex {
  int wte = -1, wpe = -1, lnf = -1, lm_head = -1, first_block = 0;
  // The head's matrix: the untied lm_head, else the tied wte.
  int head() const { return lm_head >= 0 ? lm_head : wte; }
  int block(int local_layer) const { return first_block + local_layer; }
};
SegmentIndex segment_index(const std::vector<ParameterSegment>& segments);

class ParameterLayout {
 public:
  // The whole model (one process).
  static ParameterLayout for_gpt(const GptShape& shape);
  // The tensors `partition` holds, in the same order as for_gpt, each with its slice.
  static ParameterLayout for_partition(const GptShape& shape, const ModelPartition& partition);

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView& at(const std::string& name) const;  // Error if absent
  bool has(const std::string& name) const;
  std::size_t total() const { return total_; }
  std::vector<ParameterSegment> segments() const;

  // Sharding over `shards` ranks (ZeRO, checkpoint writers): the buffer is padded to
  // padded_total(shards) elements, a multiple of shards · kShardAlignment, and rank r owns the
  // contiguous shard(r, shards) = [r·S, (r+1)·S), S = padded_total / shards. Shards past total()
  // hold padding only (zeros that no tensor reads); with one shard, the padding is the alignment.
  static constexpr std::size_t kShardAlignment = 64;  // elements: 256 B of fp32, any vector width
  std::size_t padded_total(int shards) const { return padded_size(total_, shards); }
  ElementRange shard(int rank, int shards) const { return shard_of(total_, rank, shards); }
  // The same for a buffer of `total` elements (buffers padded beyond their own layout).
  static std::size_t padded_size(std::size_t total, int shards);
  static ElementRange shard_of(std::size_t total, int rank, int shards);

  // The elements AdamW decays (the `decay` tensors: 2-D weights) as sorted, disjoint ranges,
  // adjacent tensors merged.
  std::vector<ElementRange> decayed_ranges() const;

 private:
  // A tensor split along `mid` of its logical (outer, mid, inner) view into `parts` equal blocks,
  // holding block `part` (parts = 1: whole).
  void add(std::string name, std::vector<std::int64_t> logical_shape, bool decay,
           std::int64_t outer, std::int64_t mid, std::int64_t inner, int part, int parts);
  std::vector<TensorView> tensors_;
  std::size_t total_ = 0;
};

// GPT-2 initialisation as a pure function of (seed, parameter name, logical element index), so it
// is the same under any layout and partition: weights N(0, 0.02), residual projections (attn.proj,
// mlp.proj weights) N(0, 0.02/√(2·n_layer)), biases 0, LayerNorm weights 1, padded vocabulary rows
// 0.
void initialize_gpt_parameters(const ParameterLayout& layout, const GptShape& shape,
                               std::uint64_t seed, float* params);
// The same for the elements `range` of the layout only (params[i] is element range.begin + i;
// elements past layout.total() are padding, set to 0): a ZeRO-3 shard.
void initialize_gpt_parameters(const ParameterLayout& layout, const GptShape& shape,
                               std::uint64_t seed, float* params, const ElementRange& range);

}  // namespace strata

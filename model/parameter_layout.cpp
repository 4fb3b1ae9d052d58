#include "model/parameter_layout.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "model/core/counter_rng.h"
#include "model/core/error.h"

namespace strata {

namespace {
// The parameters of a GPT whose MoE blocks use `experts_used` experts each; `with_wte`: counting
// the embedding table (always, tied, as the head's matrix; untied, only if asked).
std::int64_t gpt_params(const GptShape& s, int experts_used, bool with_wte) {
  const std::int64_t C = s.d_model, F = s.ffn_width(), fc = s.fc_width(), qkv = s.qkv_width();
  const std::int64_t bias = s.arch.bias ? 1 : 0;
  const std::int64_t norm = (s.arch.norm == Norm::layernorm && s.arch.bias ? 2 : 1) * C;
  const std::int64_t mlp = fc * C + C * F + bias * (fc + C);                     // fc, proj
  const std::int64_t attention = qkv * C + C * C + bias * (qkv + C) + 2 * norm;  // qkv, proj, norms
  std::int64_t blocks = 0;
  for (int i = 0; i < s.n_layer; ++i)
    blocks += attention +
              (s.moe.is_moe_block(i) ? s.moe.experts * C + experts_used * mlp : mlp);  // router
  const std::int64_t table = static_cast<std::int64_t>(s.padded_vocab()) * C;
  const std::int64_t embeddings = s.arch.tie_embeddings ? table : table + (with_wte ? table : 0);
  return embeddings + blocks + norm;
}
}  // namespace

int GptShape::ffn_width() const {
  if (arch.d_ff > 0) return arch.d_ff;
  if (arch.mlp == MlpKind::gelu) return 4 * d_model;
  const int multiple = arch.ffn_multiple_of;
  return (8 * d_model / 3 + multiple - 1) / multiple * multiple;
}

std::int64_t GptShape::params_excluding_positions() const {
  return gpt_params(*this, moe.experts, true);
}

std::int64_t GptShape::active_params_excluding_positions() const {
  return gpt_params(*this, moe.top_k, false);
}

double GptShape::flops_per_token() const {
  return 6.0 * static_cast<double>(active_params_excluding_positions()) +
         12.0 * n_layer * d_model * static_cast<double>(seq_len);
}

ModelPartition ModelPartition::whole(const GptShape& shape) {
  ModelPartition partition;
  partition.layer_end = shape.n_layer;
  return partition;
}

LayerRange ModelPartition::chunk_layers(int chunk) const {
  STRATA_CHECK(0 <= chunk && chunk < chunks(), "chunk ", chunk, " of a partition of ", chunks());
  if (chunk == 0) return {layer_begin, layer_end};
  return later_chunks[static_cast<std::size_t>(chunk - 1)];
}

int ModelPartition::layers() const {
  int count = layer_end - layer_begin;
  for (const LayerRange& r : later_chunks) count += r.end - r.begin;
  return count;
}

ModelPartition ModelPartition::chunk(int chunk) const {
  const LayerRange range = chunk_layers(chunk);
  ModelPartition one = *this;
  one.later_chunks.clear();
  one.layer_begin = range.begin;
  one.layer_end = range.end;
  one.has_embedding = has_embedding && chunk == 0;
  one.has_head = has_head && chunk == chunks() - 1;
  return one;
}

void ParameterLayout::add(std::string name, std::vector<std::int64_t> logical_shape, bool decay,
                          std::int64_t outer, std::int64_t mid, std::int64_t inner, int part,
                          int parts) {
  STRATA_CHECK(mid % parts == 0, "tensor '", name, "' does not split into ", parts, " parts");
  TensorSlice slice{std::move(logical_shape), outer, mid, inner, mid / parts * part, mid / parts};
  // Local shape: the logical shape with the split dimension shrunk. A split of the last logical
  // dimension (inner == 1 with a 2-D tensor) shrinks columns, otherwise rows.
  std::vector<std::int64_t> shape = slice.logical_shape;
  if (shape.size() == 2 && inner == 1 && outer > 1 && parts > 1)
    shape[1] = slice.mid_count;
  else
    shape[0] = shape[0] / parts;
  const std::size_t size = static_cast<std::size_t>(outer * slice.mid_count * inner);
  tensors_.push_back(TensorView{std::move(name), std::move(shape), total_, size, decay, slice});
  total_ += size;
}

ParameterLayout ParameterLayout::for_gpt(const GptShape& shape) {
  return for_partition(shape, ModelPartition::whole(shape));
}

ParameterLayout ParameterLayout::for_partition(const GptShape& s, const ModelPartition& p) {
  int previous_end = 0;
  for (int c = 0; c < p.chunks(); ++c) {
    const LayerRange r = p.chunk_layers(c);
    STRATA_CHECK((c == 0 ? 0 : previous_end) <= r.begin && r.begin <= r.end && r.end <= s.n_layer,
                 "the chunks of a partition are disjoint layer ranges in layer order");
    previous_end = r.end;
  }
  STRATA_CHECK(p.tp_size >= 1 && 0 <= p.tp_rank && p.tp_rank < p.tp_size);
  STRATA_CHECK(p.ep_size >= 1 && 0 <= p.ep_rank && p.ep_rank < p.ep_size &&
                   (!s.moe.enabled() || s.moe.experts % p.ep_size == 0),
               "expert parallelism of ", p.ep_size, " does not divide ", s.moe.experts, " experts");
  const std::int64_t C = s.d_model, Vp = s.padded_vocab(), F = s.ffn_width();
  const std::int64_t hs = s.head_size(), KV = s.kv_head_count();
  const bool bias = s.arch.bias, norm_bias = bias && s.arch.norm == Norm::layernorm;
  const bool swiglu = s.arch.mlp == MlpKind::swiglu;
  const int r = p.tp_rank, n = p.tp_size;
  ParameterLayout layout;
  // Replicated over the tensor-parallel group.
  auto whole = [&](const std::string& name, std::vector<std::int64_t> shape, bool decay) {
    std::int64_t size = 1;
    for (std::int64_t d : shape) size *= d;
    layout.add(name, std::move(shape), decay, 1, size, 1, 0, 1);
  };
  auto norm = [&](const std::string& name) {
    whole(name + ".weight", {C}, false);
    if (norm_bias) whole(name + ".bias", {C}, false);
  };
  // The head's matrix is wte (tied: both pipeline ends hold it) or lm_head, last in the layout.
  const bool tied = s.arch.tie_embeddings;
  if (p.has_embedding || (p.has_head && tied)) layout.add("wte", {Vp, C}, true, 1, Vp, C, r, n);
  if (p.has_embedding && s.arch.position == Position::learned) whole("wpe", {s.seq_len, C}, true);
  auto block = [&](int i) {
    const std::string h = "h." + std::to_string(i) + ".";
    norm(h + "ln1");
    // Column-parallel: each rank computes its heads' q, k and v, its rows [q | k | v] of each
    // tensor adjacent in the buffer, so one product computes them all. Multi-head: one fused
    // tensor (3C, C), viewed as (3, C, C); grouped-query: three (ARCHITECTURE §5).
    if (!s.grouped_query()) {
      layout.add(h + "attn.qkv.weight", {3 * C, C}, true, 3, C, C, r, n);
      if (bias) layout.add(h + "attn.qkv.bias", {3 * C}, false, 3, C, 1, r, n);
    } else {
      for (const char* part : {"q", "k", "v"}) {
        const std::int64_t rows = part[0] == 'q' ? C : KV * hs;
        layout.add(h + "attn." + part + ".weight", {rows, C}, true, 1, rows, C, r, n);
      }
      if (bias)
        for (const char* part : {"q", "k", "v"}) {
          const std::int64_t rows = part[0] == 'q' ? C : KV * hs;
          layout.add(h + "attn." + part + ".bias", {rows}, false, 1, rows, 1, r, n);
        }
    }
    // Row-parallel: each rank multiplies its heads' outputs; the sum over ranks is the output.
    layout.add(h + "attn.proj.weight", {C, C}, true, C, C, 1, r, n);
    if (bias) whole(h + "attn.proj.bias", {C}, false);
    norm(h + "ln2");
    // The MLP, or the block's experts after their router (replicated), in model/moe/moe_layer.h's
    // order: each expert's fc column-parallel and proj row-parallel, as the dense MLP's. SwiGLU's
    // fc is the fused gate and up projections (2F, C), viewed as (2, F, C): gate rows first, and a
    // rank holds [its gate rows | its up rows].
    const bool moe = s.moe.is_moe_block(i);
    if (moe) whole(h + "moe.router.weight", {s.moe.experts, C}, true);
    const int first = moe ? p.first_expert(s.moe.experts) : 0;
    const std::int64_t halves = swiglu ? 2 : 1;
    for (int e = first; e < first + (moe ? p.experts_held(s.moe.experts) : 1); ++e) {
      const std::string m = moe ? h + "moe.experts." + std::to_string(e) + "." : h + "mlp.";
      layout.add(m + "fc.weight", {halves * F, C}, true, halves, F, C, r, n);
      if (bias) layout.add(m + "fc.bias", {halves * F}, false, halves, F, 1, r, n);
      layout.add(m + "proj.weight", {C, F}, true, C, F, 1, r, n);
      if (bias) whole(m + "proj.bias", {C}, false);
    }
  };
  for (int c = 0; c < p.chunks(); ++c)
    for (int i = p.chunk_layers(c).begin; i < p.chunk_layers(c).end; ++i) block(i);
  if (p.has_head) {
    norm("lnf");
    if (!tied) layout.add("lm_head.weight", {Vp, C}, true, 1, Vp, C, r, n);
  }
  return layout;
}

const TensorView& ParameterLayout::at(const std::string& name) const {
  for (const TensorView& t : tensors_)
    if (t.name == name) return t;
  fail("no parameter named '", name, "'");
}

std::vector<ParameterSegment> ParameterLayout::segments() const {
  std::vector<ParameterSegment> result;
  for (const TensorView& t : tensors_) {
    // "h.3.attn.qkv.weight" -> "h.3"; "lnf.weight" -> "lnf"; "wte" -> "wte".
    std::string name = t.name.substr(0, t.name.find('.'));
    if (name == "h") name = t.name.substr(0, t.name.find('.', 2));
    const ElementRange range{t.offset, t.offset + t.size};
    if (!result.empty() && result.back().name == name) {
      STRATA_CHECK(result.back().range.end == range.begin, "segment '", name,
                   "' is not contiguous");
      result.back().range.end = range.end;
    } else {
      result.push_back({std::move(name), range});
    }
  }
  return result;
}

SegmentIndex segment_index(const std::vector<ParameterSegment>& segments) {
  SegmentIndex index;
  for (int i = static_cast<int>(segments.size()) - 1; i >= 0; --i) {
    const std::string& name = segments[static_cast<std::size_t>(i)].name;
    if (name == "wte") index.wte = i;
    if (name == "wpe") index.wpe = i;
    if (name == "lnf") index.lnf = i;
    if (name == "lm_head") index.lm_head = i;
    if (name.starts_with("h.")) index.first_block = i;
  }
  return index;
}

bool ParameterLayout::has(const std::string& name) const {
  for (const TensorView& t : tensors_)
    if (t.name == name) return true;
  return false;
}

std::size_t ParameterLayout::padded_size(std::size_t total, int shards) {
  STRATA_CHECK(shards >= 1);
  const std::size_t unit = kShardAlignment * static_cast<std::size_t>(shards);
  return std::max<std::size_t>(1, (total + unit - 1) / unit) * unit;
}

ElementRange ParameterLayout::shard_of(std::size_t total, int rank, int shards) {
  STRATA_CHECK(0 <= rank && rank < shards);
  const std::size_t size = padded_size(total, shards) / static_cast<std::size_t>(shards);
  return {static_cast<std::size_t>(rank) * size, static_cast<std::size_t>(rank + 1) * size};
}

std::vector<ElementRange> ParameterLayout::decayed_ranges() const {
  std::vector<ElementRange> ranges;
  for (const TensorView& t : tensors_)
    if (t.decay) append_merged(ranges, {t.offset, t.offset + t.size});
  return ranges;
}

namespace {
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
}  // namespace

void initialize_gpt_parameters(const ParameterLayout& layout, const GptShape& shape,
                               std::uint64_t seed, float* params) {
  initialize_gpt_parameters(layout, shape, seed, params, {0, layout.total()});
}

void initialize_gpt_parameters(const ParameterLayout& layout, const GptShape& shape,
                               std::uint64_t seed, float* params, const ElementRange& range) {
  const double residual_std = 0.02 / std::sqrt(2.0 * shape.n_layer);
  if (range.end > layout.total())
    std::fill(params + (std::max(range.begin, layout.total()) - range.begin), params + range.size(),
              0.0f);
  for (const TensorView& t : layout.tensors()) {
    const ElementRange part = intersect({t.offset, t.offset + t.size}, range);
    if (part.empty()) continue;
    // Element i of the tensor, for i in [first, last), lands at out[i - first].
    float* out = params + (part.begin - range.begin);
    const std::size_t first = part.begin - t.offset, last = part.end - t.offset;
    const bool is_weight_matrix = t.slice.logical_shape.size() == 2;
    if (!is_weight_matrix) {
      const float value = ends_with(t.name, ".weight") ? 1.0f : 0.0f;  // LN gain 1, biases 0
      for (std::size_t i = first; i < last; ++i) out[i - first] = value;
      continue;
    }
    // Every residual projection: attention's, the MLP's, each expert's.
    const bool residual = ends_with(t.name, ".proj.weight");
    const double stddev = residual ? residual_std : 0.02;
    const std::uint64_t key = hash_combine(seed, hash_name(t.name));
    // Only real vocabulary rows of wte are drawn; padded rows stay 0 (they are never targets).
    const bool table = t.name == "wte" || t.name == "lm_head.weight";
    const std::int64_t live = table ? static_cast<std::int64_t>(shape.vocab_size) * shape.d_model
                                    : t.slice.logical_size();
#pragma omp parallel for schedule(static)
    for (std::size_t i = first; i < last; ++i) {
      const std::int64_t g = t.slice.logical_index(static_cast<std::int64_t>(i));
      out[i - first] =
          g < live ? static_cast<float>(stddev * counter_normal(key, static_cast<std::uint64_t>(g)))
                   : 0.0f;
    }
  }
}

}  // namespace strata

#include "parallel/zero/segment_collectives.h"

#include <algorithm>

#include "model/core/error.h"
#include "model/kernels/cpu/quantize.h"

namespace strata {

QuantizedShardLayout weight_layout(std::size_t elements) {
  return quantized_shard_layout(elements, kWeightQuantBlock, QuantFormat::int8);
}

QuantizedShardLayout gradient_layout(std::size_t elements) {
  return quantized_shard_layout(elements, kGradientQuantBlock, QuantFormat::int4);
}

namespace {

std::vector<std::size_t> starts_of(std::span<const std::size_t> counts) {
  std::vector<std::size_t> starts(counts.size() + 1, 0);
  for (std::size_t r = 0; r < counts.size(); ++r) starts[r + 1] = starts[r] + counts[r];
  return starts;
}

}  // namespace

SegmentGather::SegmentGather(Communicator& group, std::span<const std::size_t> counts,
                             const float* mine, float* out, bool quantized)
    : counts_(counts.begin(), counts.end()), out_(out), quantized_(quantized) {
  const std::size_t me = static_cast<std::size_t>(group.rank());
  if (!quantized) {
    pending_ = group.start_all_gather_v(mine, out, counts);
    return;
  }
  std::size_t total = 0;
  for (std::size_t c : counts_) {
    byte_counts_.push_back(weight_layout(c).bytes);
    total += byte_counts_.back();
  }
  mine_packed_.resize(byte_counts_[me]);
  if (counts_[me] > 0)
    cpu::quantize_shards(mine, weight_layout(counts_[me]), 1, mine_packed_.data());
  all_packed_.resize(total);
  pending_ = group.start_all_gather_v(mine_packed_.data(), all_packed_.data(),
                                      std::span<const std::size_t>(byte_counts_));
}

void SegmentGather::finish() {
  pending_->wait();
  if (!quantized_) return;
  std::size_t byte = 0, element = 0;
  for (std::size_t r = 0; r < counts_.size(); ++r) {
    if (counts_[r] > 0)
      cpu::dequantize_shards(all_packed_.data() + byte, weight_layout(counts_[r]), 1,
                             out_ + element);
    byte += byte_counts_[r];
    element += counts_[r];
  }
}

std::unique_ptr<SegmentGather> start_segment_gather(Communicator& group,
                                                    std::span<const std::size_t> counts,
                                                    const float* mine, float* out, bool quantized) {
  return std::make_unique<SegmentGather>(group, counts, mine, out, quantized);
}

namespace {

// One quantised all-to-all hop over `group`: to member p the pieces `to[p]` (lists of
// (pointer, elements)), from member q as many pieces as `from_counts` lists (the same for every
// q), each dequantised and added into `sums` (one fp32 array per piece, in from_counts order).
// Over a group of one the values are added unquantised.
void quantized_hop(Communicator& group,
                   const std::vector<std::vector<std::pair<const float*, std::size_t>>>& to,
                   const std::vector<std::size_t>& from_counts, std::vector<float*>& sums) {
  const std::size_t n = static_cast<std::size_t>(group.size());
  if (n == 1) {
    for (std::size_t k = 0; k < from_counts.size(); ++k)
      for (std::size_t i = 0; i < from_counts[k]; ++i) sums[k][i] += to[0][k].first[i];
    return;
  }
  std::vector<std::size_t> send_bytes(n, 0), recv_bytes(n, 0);
  std::size_t send_total = 0;
  for (std::size_t p = 0; p < n; ++p)
    for (const auto& [data, count] : to[p]) send_bytes[p] += gradient_layout(count).bytes;
  std::size_t per_source = 0;
  for (std::size_t c : from_counts) per_source += gradient_layout(c).bytes;
  for (std::size_t q = 0; q < n; ++q) recv_bytes[q] = per_source;
  for (std::size_t b : send_bytes) send_total += b;
  std::vector<std::uint8_t> send(send_total), received(per_source * n);
  std::size_t at = 0;
  for (std::size_t p = 0; p < n; ++p)
    for (const auto& [data, count] : to[p]) {
      const QuantizedShardLayout layout = gradient_layout(count);
      if (count > 0) cpu::quantize_shards(data, layout, 1, send.data() + at);
      at += layout.bytes;
    }
  group.all_to_all_v(send.data(), std::span<const std::size_t>(send_bytes), received.data(),
                     std::span<const std::size_t>(recv_bytes));
  at = 0;
  for (std::size_t q = 0; q < n; ++q)  // sources in member order, as the fp32 sums add
    for (std::size_t k = 0; k < from_counts.size(); ++k) {
      const QuantizedShardLayout layout = gradient_layout(from_counts[k]);
      if (from_counts[k] > 0)
        cpu::dequantize_add_shards(received.data() + at, layout, 1, 1, sums[k]);
      at += layout.bytes;
    }
}

}  // namespace

void reduce_scatter_segment(Communicator& dp, std::span<const std::size_t> counts,
                            const float* segment, float* mine, const NodeGroups* qgz) {
  const std::size_t n = static_cast<std::size_t>(dp.size());
  const std::vector<std::size_t> starts = starts_of(counts);
  if (qgz == nullptr || starts[n] < kGradientQuantBlock * n) {
    dp.reduce_scatter_sum_v(segment, mine, counts);
    return;
  }
  const std::size_t intra = static_cast<std::size_t>(qgz->intra->size());
  const std::size_t inter = static_cast<std::size_t>(qgz->inter->size());
  const std::size_t local = static_cast<std::size_t>(qgz->intra->rank());
  const std::size_t node = static_cast<std::size_t>(qgz->inter->rank());
  STRATA_CHECK(intra * inter == n && node * intra + local == static_cast<std::size_t>(dp.rank()),
               "qgZ: the node groups do not factor the data-parallel group");
  auto owner = [&](std::size_t j, std::size_t l) { return j * intra + l; };
  // Hop 1, inside the node: to peer l the pieces of owners (j, l) for every node j.
  std::vector<std::vector<std::pair<const float*, std::size_t>>> to(intra);
  for (std::size_t l = 0; l < intra; ++l)
    for (std::size_t j = 0; j < inter; ++j)
      to[l].push_back({segment + starts[owner(j, l)], counts[owner(j, l)]});
  std::vector<std::size_t> partial_counts;
  std::vector<std::vector<float>> partials(inter);
  std::vector<float*> partial_sums;
  for (std::size_t j = 0; j < inter; ++j) {
    partial_counts.push_back(counts[owner(j, local)]);
    partials[j].assign(partial_counts.back(), 0.0f);
    partial_sums.push_back(partials[j].data());
  }
  quantized_hop(*qgz->intra, to, partial_counts, partial_sums);
  // Hop 2, across nodes among the ranks of this local index: partial j to node j.
  std::vector<std::vector<std::pair<const float*, std::size_t>>> across(inter);
  for (std::size_t j = 0; j < inter; ++j)
    across[j].push_back({partials[j].data(), partial_counts[j]});
  const std::size_t own = counts[static_cast<std::size_t>(dp.rank())];
  std::fill(mine, mine + own, 0.0f);
  std::vector<float*> result{mine};
  quantized_hop(*qgz->inter, across, {own}, result);
}

}  // namespace strata

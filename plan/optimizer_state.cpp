#include "plan/optimizer_state.h"

#include <algorithm>

namespace strata {

bool muon_updates(const TensorView& t) {
  return t.decay && t.name != "wte" && t.name != "wpe" && t.name != "lm_head.weight" &&
         !t.name.ends_with("router.weight");
}

std::vector<ChunkedPart> chunked_parts(const ParameterLayout& layout, ElementRange owned,
                                       const OptimizerConfig& config) {
  switch (config.name) {
    case OptimizerName::adamw:
      return {{owned.size(), {4, 4}}};
    case OptimizerName::adafactor:
      if (config.adafactor.beta1 > 0) return {{owned.size(), {4}}};
      return {};
    case OptimizerName::adamw8bit:
      return {{owned.size(), {1, 1}}};
    case OptimizerName::muon: {
      ChunkedPart adamw{0, {4, 4}}, momentum{0, {4}};
      for (const TensorView& t : layout.tensors())
        (muon_updates(t) ? momentum : adamw).elements +=
            intersect({t.offset, t.offset + t.size}, owned).size();
      return {adamw, momentum};
    }
  }
  return {};
}

std::size_t chunk_plane_bytes(std::size_t count, std::size_t width) {
  return (count * width + 7) / 8 * 8;
}

std::size_t chunk_buffer_bytes(std::size_t count, const std::vector<std::size_t>& widths) {
  std::size_t bytes = 0;
  for (const std::size_t w : widths) bytes += chunk_plane_bytes(count, w);
  return bytes;
}

std::size_t offload_stream_bytes(const ParameterLayout& layout, ElementRange owned,
                                 const OptimizerConfig& config) {
  const std::size_t passes = config.name == OptimizerName::adamw8bit ? 3 : 2;
  std::size_t bytes = 0;
  for (const ChunkedPart& part : chunked_parts(layout, owned, config))
    for (const std::size_t w : part.widths) bytes += passes * part.elements * w;
  return bytes;
}

std::size_t optimizer_state_bytes(const ParameterLayout& layout, ElementRange owned,
                                  const OptimizerConfig& config) {
  std::size_t bytes = 0;
  for (const ChunkedPart& part : chunked_parts(layout, owned, config)) {
    if (config.offload == OptimizerOffload::disk) {
      const auto chunk = std::min(part.elements, static_cast<std::size_t>(config.offload_chunk));
      bytes += 3 * chunk_buffer_bytes(chunk, part.widths);
    } else {
      for (const std::size_t w : part.widths) bytes += part.elements * w;
    }
  }
  // What stays resident whatever the offload: Adafactor's statistics, the 8-bit blocks' scales
  // and maxima.
  if (config.name == OptimizerName::adafactor)
    for (const TensorView& t : layout.tensors()) {
      if (intersect({t.offset, t.offset + t.size}, owned).empty()) continue;
      const auto& shape = t.slice.logical_shape;
      bytes += sizeof(float) *
               static_cast<std::size_t>(shape.size() == 2 ? shape[0] + shape[1] : shape[0]);
    }
  if (config.name == OptimizerName::adamw8bit)
    bytes += 24 * adamw8bit_blocks(layout, config.adamw8bit.block_size).all;
  return bytes;
}

AdamW8bitBlocks adamw8bit_blocks(const ParameterLayout& layout, int block_size) {
  AdamW8bitBlocks b;
  for (const TensorView& t : layout.tensors()) {
    const auto blocks =
        static_cast<std::size_t>((t.slice.logical_size() + block_size - 1) / block_size);
    b.all += blocks;
    if (!t.slice.is_whole()) b.split += blocks;
  }
  return b;
}

AdafactorSums adafactor_sums(const ParameterLayout& layout) {
  AdafactorSums s;
  for (const TensorView& t : layout.tensors()) {
    const auto& shape = t.slice.logical_shape;
    const std::size_t statistics =
        static_cast<std::size_t>(shape.size() == 2 ? shape[0] + shape[1] : shape[0]);
    const bool split = !t.slice.is_whole();
    if (t.name == "wte") {
      s.wte_statistics = statistics;
      s.wte_norms = 2;
      s.wte_split = split;
      continue;
    }
    s.other_statistics += statistics;
    s.other_norms += 2;
    if (split) {
      s.split_statistics += statistics;
      s.split_norms += 2;
    }
  }
  return s;
}

Work optimizer_work(const Config& config, const ParameterLayout& layout, ElementRange owned,
                    std::size_t gradients) {
  // Bytes per owned element: AdamW reads weight, gradient, m and v and writes weight, m and v
  // (28); Adafactor reads the gradient in three passes (squares, RMS of the update, the update)
  // and the weight in two, writes the weight (24), and m read and written with beta1; AdamW8bit
  // runs its update twice (26: see below); Muon reads
  // the gradient and reads and writes m and the weight (20) on its matrices, AdamW's 28
  // elsewhere. The norm reads the gradient again; a reduced-precision run writes its compute
  // copy; the next step's accumulation starts from zeroed gradients.
  const double extra = 4 + (config.precision.compute == cpu::ComputeDtype::fp32 ? 0 : 4);
  Work work{0, 0, 4.0 * static_cast<double>(gradients), 4};
  const OptimizerConfig& o = config.optimizer;
  // AdamW updates the padding past the layout too (zeros that stay zero); the others skip it.
  double covered = 0;
  for (const TensorView& t : layout.tensors()) {
    const double n = static_cast<double>(intersect({t.offset, t.offset + t.size}, owned).size());
    if (n == 0) continue;
    covered += n;
    double per_element = 28;
    if (o.name == OptimizerName::adafactor) per_element = o.adafactor.beta1 > 0 ? 32 : 24;
    // Two passes, each reading the gradient, the weight and both codes; the second writes the
    // weight and the codes.
    if (o.name == OptimizerName::adamw8bit) per_element = 2 * 10 + 6;
    if (o.name == OptimizerName::muon && muon_updates(t)) {
      per_element = 20;
      // Newton-Schulz on the whole matrix, r <= k: X·Xᵀ, A·A and B·X per step.
      const double rows = static_cast<double>(t.slice.logical_shape[0]);
      const double cols = static_cast<double>(t.slice.logical_shape[1]);
      const double r = std::min(rows, cols), k = std::max(rows, cols);
      work.gemm_flops += o.muon.ns_steps * (2 * r * r * k + 2 * r * r * r + 2 * r * r * k);
      work.kernels += 3 * o.muon.ns_steps;
    }
    work.elementwise_bytes += (per_element + extra) * n;
  }
  if (o.name == OptimizerName::adamw)
    work.elementwise_bytes += (28 + extra) * (static_cast<double>(owned.size()) - covered);
  return work;
}

}  // namespace strata

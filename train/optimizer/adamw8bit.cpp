#include "train/optimizer/adamw8bit.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "model/core/error.h"
#include "model/kernels/adamw_element.h"
#include "model/kernels/dynamic_quant.h"
#include "train/optimizer/tensor_parts.h"

namespace strata {
namespace {

// Non-negative floats order as their bits do.
std::int64_t order_bits(float nonnegative) {
  return static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(nonnegative));
}
float from_order_bits(std::int64_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
}

// Below this many segments the loops run on one thread (waking the team costs more).
constexpr std::size_t kParallelSegments = 64;

}  // namespace

AdamW8bit::AdamW8bit(const ParameterLayout& layout, ElementRange range,
                     const OptimizerConfig& config, OptimizerGroups groups)
    : range_(range),
      config_(config),
      groups_(groups),
      state_(make_chunked_state(chunked_parts(layout, range, config).at(0), config)) {
  const auto block = static_cast<std::int64_t>(config.adamw8bit.block_size);
  // Segments end at the state's chunks too, so that a chunk's segments are whole.
  const auto chunk = static_cast<std::int64_t>(state_->chunk_elements());
  // The whole tensors' blocks first, then those of the tensors tensor parallelism splits (the
  // part of the maxima agreed over tp).
  bool in_split = false;
  for (const TensorPart& part : tensor_parts(layout, range_, TensorOrder::whole_first)) {
    const TensorView& t = *part.view;
    if (part.split && !in_split) {
      split_blocks_begin_ = blocks_;
      in_split = true;
    }
    const std::int64_t logical_size = t.slice.logical_size();
    const std::size_t first_block = blocks_;
    const std::int64_t tensor_blocks = (logical_size + block - 1) / block;
    blocks_ += static_cast<std::size_t>(tensor_blocks);
    scale_stats_.push_back({t.name, tensor_blocks});
    const ElementRange& held = part.held;
    // Local order is logical order within each (mid_count · inner) run of the slice.
    const std::int64_t run = t.slice.mid_count * t.slice.inner;
    for (auto local = static_cast<std::int64_t>(held.begin - t.offset),
              end = static_cast<std::int64_t>(held.end - t.offset);
         local < end;) {
      const std::int64_t logical = t.slice.logical_index(local);
      const std::size_t at = t.offset + static_cast<std::size_t>(local) - range_.begin;
      const std::int64_t count =
          std::min({end - local, (local / run + 1) * run - local, block - logical % block,
                    chunk - static_cast<std::int64_t>(at) % chunk});
      segments_.push_back({at, static_cast<std::size_t>(count),
                           first_block + static_cast<std::size_t>(logical / block), t.decay});
      local += count;
    }
  }
  if (!in_split) split_blocks_begin_ = blocks_;
  // In element order, each chunk's segments a run of their own.
  std::sort(segments_.begin(), segments_.end(),
            [](const Segment& a, const Segment& b) { return a.at < b.at; });
  const auto chunk_size = static_cast<std::size_t>(chunk);
  const std::size_t chunks = (range_.size() + chunk_size - 1) / chunk_size;
  for (std::size_t k = 0; k <= chunks; ++k)
    chunk_segments_.push_back(static_cast<std::size_t>(
        std::lower_bound(segments_.begin(), segments_.end(), k * chunk_size,
                         [](const Segment& s, std::size_t at) { return s.at < at; }) -
        segments_.begin()));
  m_scale_.assign(blocks_, 0.0f);
  v_scale_.assign(blocks_, 0.0f);
  maxima_.assign(2 * blocks_, 0);
}

template <class Body>
void AdamW8bit::for_segments(const ChunkedState::Chunk& c, Body body) const {
  const std::size_t k = c.first / state_->chunk_elements();
  const auto begin = static_cast<std::ptrdiff_t>(chunk_segments_[k]);
  const auto end = static_cast<std::ptrdiff_t>(chunk_segments_[k + 1]);
#pragma omp parallel for schedule( \
    dynamic, 16) if (static_cast <std::size_t>(end - begin) >= kParallelSegments)
  for (std::ptrdiff_t s = begin; s < end; ++s) body(segments_[static_cast<std::size_t>(s)]);
}

void AdamW8bit::update(float* params, const float* grads, const OptimizerStep& step) {
  const AdamWConstants h =
      adamw_constants(static_cast<float>(step.lr), static_cast<float>(config_.beta1),
                      static_cast<float>(config_.beta2), static_cast<float>(config_.eps),
                      static_cast<float>(step.grad_scale), step.count);
  const float decay = static_cast<float>(config_.weight_decay);
  const float* magnitude = dynamic_codes().magnitude.data();
  const float* unsigned_code = dynamic_codes().unsigned_code.data();
  // The new moments of element i (of the range; its codes at i − c.first in the chunk), from the
  // stored ones; p updated when `store`.
  auto step_element = [&](const ChunkedState::Chunk& c, const Segment& s, std::size_t i, float& p,
                          float& m, float& v) {
    m = dequantize_signed(magnitude, c.plane<std::int8_t>(0)[i - c.first], m_scale_[s.block]);
    v = dequantize_unsigned(unsigned_code, c.plane<std::uint8_t>(1)[i - c.first],
                            v_scale_[s.block]);
    adamw_element(p, m, v, grads[i], s.decay ? decay : 0.0f, h);
  };

  // Pass 1: every block's largest new |m| and v over the elements held here.
  std::vector<float> segment_m(segments_.size()), segment_v(segments_.size());
  state_->visit(
      [&](const ChunkedState::Chunk& c) {
        for_segments(c, [&](const Segment& s) {
          float largest_m = 0.0f, largest_v = 0.0f;
          for (std::size_t i = s.at; i < s.at + s.count; ++i) {
            float p = params[i], m, v;
            step_element(c, s, i, p, m, v);
            largest_m = std::max(largest_m, std::fabs(m));
            largest_v = std::max(largest_v, v);
          }
          const std::size_t k = static_cast<std::size_t>(&s - segments_.data());
          segment_m[k] = largest_m;
          segment_v[k] = largest_v;
        });
      },
      true);
  std::fill(maxima_.begin(), maxima_.end(), 0);
  for (std::size_t k = 0; k < segments_.size(); ++k) {
    std::int64_t* block = maxima_.data() + 2 * segments_[k].block;
    block[0] = std::max(block[0], order_bits(segment_m[k]));
    block[1] = std::max(block[1], order_bits(segment_v[k]));
  }
  // Over every holder of each block.
  if (groups_.owners) groups_.owners->all_reduce_max(maxima_.data(), maxima_.size());
  if (groups_.tp && blocks_ > split_blocks_begin_)
    groups_.tp->all_reduce_max(maxima_.data() + 2 * split_blocks_begin_,
                               2 * (blocks_ - split_blocks_begin_));

  // Pass 2: the update, the moments stored under the agreed scales (a value a rounding above its
  // block's scale takes the largest code).
  state_->visit([&](const ChunkedState::Chunk& c) {
    for_segments(c, [&](const Segment& s) {
      const float m_scale = from_order_bits(maxima_[2 * s.block]);
      const float v_scale = from_order_bits(maxima_[2 * s.block + 1]);
      for (std::size_t i = s.at; i < s.at + s.count; ++i) {
        float m, v;
        step_element(c, s, i, params[i], m, v);
        c.plane<std::int8_t>(0)[i - c.first] = quantize_signed(magnitude, m, m_scale);
        c.plane<std::uint8_t>(1)[i - c.first] = quantize_unsigned(unsigned_code, v, v_scale);
      }
    });
    test_kill_in_update(step, c.first);
  });
  for (std::size_t b = 0; b < blocks_; ++b) {
    m_scale_[b] = from_order_bits(maxima_[2 * b]);
    v_scale_[b] = from_order_bits(maxima_[2 * b + 1]);
  }
}

std::vector<StateBuffer> AdamW8bit::save() const {
  std::vector<std::int8_t> m(range_.size());
  std::vector<std::uint8_t> v(range_.size());
  state_->read_all({m.data(), v.data()});
  std::vector<StateBuffer> buffers{{"m", range_, std::vector<float>(m.begin(), m.end())},
                                   {"v", range_, std::vector<float>(v.begin(), v.end())},
                                   {"m_scale", {}, {}, true, scale_stats_},
                                   {"v_scale", {}, {}, true, scale_stats_}};
  buffers[0].stored = StoredType::int8;
  buffers[1].stored = StoredType::uint8;
  // The statistics in scale_stats_ order, which is the order of the blocks.
  buffers[2].values = m_scale_;
  buffers[3].values = v_scale_;
  return buffers;
}

void AdamW8bit::load(const std::vector<StateBuffer>& buffers) {
  // The codes arrive as floats (a checkpoint's int8 and uint8 datasets, read as fp32); only the
  // buffers given are replaced.
  std::vector<std::int8_t> m_codes(range_.size());
  std::vector<std::uint8_t> v_codes(range_.size());
  state_->read_all({m_codes.data(), v_codes.data()});
  std::vector<float> m(m_codes.begin(), m_codes.end()), v(v_codes.begin(), v_codes.end());
  load_state_values(buffers, {{"m_scale", &m_scale_}, {"v_scale", &v_scale_}, {"m", &m}, {"v", &v}},
                    "AdamW8bit");
  auto check_codes = [](const std::vector<float>& values, float low, float high, const char* name) {
    for (const float c : values)
      if (!(c >= low && c <= high) || c != std::nearbyint(c))
        fail("optimizer state '", name, "' holds ", c, ", not a code in [", low, ", ", high, "]");
  };
  check_codes(m, -127.0f, 127.0f, "m");
  check_codes(v, 0.0f, 255.0f, "v");
  std::transform(m.begin(), m.end(), m_codes.begin(),
                 [](float c) { return static_cast<std::int8_t>(c); });
  std::transform(v.begin(), v.end(), v_codes.begin(),
                 [](float c) { return static_cast<std::uint8_t>(c); });
  state_->write_all({m_codes.data(), v_codes.data()});
}

std::size_t AdamW8bit::state_bytes() const {
  return state_->resident_bytes() + (m_scale_.size() + v_scale_.size()) * sizeof(float) +
         maxima_.size() * sizeof(std::int64_t);
}

}  // namespace strata

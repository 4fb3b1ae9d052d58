#include "train/optimizer/muon.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "model/core/error.h"
#include "model/kernels/cpu/adamw.h"
#include "plan/optimizer_state.h"
#include "train/optimizer/newton_schulz.h"
#include "train/optimizer/tensor_parts.h"

namespace strata {

Muon::Muon(const ParameterLayout& layout, ElementRange range, const OptimizerConfig& config,
           OptimizerGroups groups)
    : range_(range), config_(config), groups_(groups) {
  std::vector<ElementRange> owners{range_};
  if (groups_.owners) {
    const int n = groups_.owners->size();
    const std::int64_t mine[2] = {static_cast<std::int64_t>(range_.begin),
                                  static_cast<std::int64_t>(range_.end)};
    std::vector<std::int64_t> all(2 * static_cast<std::size_t>(n));
    groups_.owners->all_gather(mine, all.data(), 2);
    owners.clear();
    for (int r = 0; r < n; ++r) {
      owners.push_back(
          {static_cast<std::size_t>(all[2 * r]), static_cast<std::size_t>(all[2 * r + 1])});
      STRATA_CHECK(r == 0 || owners[r].begin == owners[r - 1].end,
                   "Muon: the owners' ranges do not tile the buffer in rank order");
    }
  }
  std::size_t adamw_size = 0, momentum_size = 0;
  for (const TensorPart& part : tensor_parts(layout, range_, TensorOrder::layout)) {
    const TensorView& t = *part.view;
    const ElementRange &elements = part.elements, &held = part.held;
    if (muon_updates(t)) {
      Matrix m;
      m.slice = t.slice;
      m.elements = elements;
      m.held = held;
      m.rows = static_cast<int>(t.slice.logical_shape.at(0));
      m.cols = static_cast<int>(t.slice.logical_shape.at(1));
      m.split = part.split;
      m.momentum_at = momentum_size;
      momentum_size += held.size();
      for (const ElementRange& o : owners) m.owner_counts.push_back(intersect(elements, o).size());
      matrices_.push_back(std::move(m));
    } else if (!held.empty()) {
      adamw_.push_back({{held.begin - range_.begin, held.end - range_.begin}, adamw_size, t.decay});
      adamw_size += held.size();
    }
  }
  const std::vector<ChunkedPart> parts = chunked_parts(layout, range_, config_);
  STRATA_CHECK(parts.at(0).elements == adamw_size && parts.at(1).elements == momentum_size,
               "Muon: its state's parts differ from the planner's");
  adamw_state_ = make_chunked_state(parts[0], config_);
  momentum_ = make_chunked_state(parts[1], config_);
}

std::vector<float> Muon::gather_owners(const Matrix& m, const std::vector<float>& held_u) const {
  if (!groups_.owners) return held_u;  // the range holds the whole tensor, or none of it
  const std::size_t n = m.owner_counts.size();
  std::vector<float> send;
  for (std::size_t r = 0; r < n; ++r) send.insert(send.end(), held_u.begin(), held_u.end());
  const std::vector<std::size_t> send_counts(n, held_u.size());
  std::vector<float> local(m.elements.size());
  groups_.owners->all_to_all_v(send.data(), std::span<const std::size_t>(send_counts), local.data(),
                               std::span<const std::size_t>(m.owner_counts));
  return local;
}

std::vector<float> Muon::gather_tp(const Matrix& m, const std::vector<float>& local) const {
  const int n = groups_.tp->size();
  std::vector<float> slices(local.size() * static_cast<std::size_t>(n));
  groups_.tp->all_gather(local.data(), slices.data(), local.size());
  std::vector<float> whole(static_cast<std::size_t>(m.rows) * static_cast<std::size_t>(m.cols));
  for (int q = 0; q < n; ++q) {
    TensorSlice slice = m.slice;
    slice.mid_begin = q * slice.mid_count;
    const float* from = slices.data() + static_cast<std::size_t>(q) * local.size();
    for (std::size_t i = 0; i < local.size(); ++i)
      whole[static_cast<std::size_t>(slice.logical_index(static_cast<std::int64_t>(i)))] = from[i];
  }
  return whole;
}

void Muon::update(float* params, const float* grads, const OptimizerStep& step) {
  const float grad_scale = static_cast<float>(step.grad_scale);
  cpu::AdamWHyper hyper = adamw_hyper(config_, step);
  adamw_state_->visit([&](const ChunkedState::Chunk& c) {
    const ElementRange chunk{c.first, c.first + c.count};
    for (const AdamWRun& run : adamw_) {
      const ElementRange part = intersect({run.at, run.at + run.elements.size()}, chunk);
      if (part.empty()) continue;
      hyper.weight_decay = run.decay ? static_cast<float>(config_.weight_decay) : 0.0f;
      const std::size_t i = run.elements.begin + (part.begin - run.at);
      cpu::adamw_update(params + i, grads + i, c.plane<float>(0) + (part.begin - c.first),
                        c.plane<float>(1) + (part.begin - c.first), static_cast<long>(part.size()),
                        hyper);
    }
    test_kill_in_update(step, c.first);
  });

  const MuonConfig& muon = config_.muon;
  const float momentum = static_cast<float>(muon.momentum);
  const double lr = muon.lr * step.lr / config_.lr;
  const float decay = static_cast<float>(1.0 - lr * config_.weight_decay);
  // The matrices in order, each finished (gathered, orthogonalised, applied: collective over its
  // holders) as soon as the visit has formed all of its u.
  std::vector<float> u;
  std::size_t next = 0;
  auto finish = [&](const Matrix& m) {
    std::vector<float> local = gather_owners(m, u);
    // The tp ranks of a group hold the same parts of their slices: all skip, or none.
    if (m.held.empty()) return;
    std::vector<float> whole = m.split ? gather_tp(m, local) : std::move(local);
    newton_schulz(whole.data(), m.rows, m.cols, muon.ns_steps);
    const float rate =
        static_cast<float>(lr * std::sqrt(std::max(1.0, static_cast<double>(m.rows) / m.cols)));
    for (std::size_t e = m.held.begin; e < m.held.end; ++e) {
      const std::size_t i = e - range_.begin;
      const std::int64_t logical =
          m.slice.logical_index(static_cast<std::int64_t>(e - m.elements.begin));
      params[i] = params[i] * decay - rate * whole[static_cast<std::size_t>(logical)];
    }
  };
  momentum_->visit([&](const ChunkedState::Chunk& c) {
    const ElementRange chunk{c.first, c.first + c.count};
    for (; next < matrices_.size(); ++next) {
      const Matrix& m = matrices_[next];
      const ElementRange held{m.momentum_at, m.momentum_at + m.held.size()};
      u.resize(m.held.size());
      const ElementRange part = intersect(held, chunk);
      float* buf = c.plane<float>(0);
      for (std::size_t j = part.begin; j < part.end; ++j) {
        const std::size_t i = m.held.begin - range_.begin + (j - held.begin);
        const float g = grads[i] * grad_scale;
        float& b = buf[j - c.first];
        b = momentum * b + g;
        u[j - held.begin] = muon.nesterov ? g + momentum * b : b;
      }
      if (held.end > chunk.end) break;  // the rest of its u in the next chunk
      finish(m);
    }
  });
  for (; next < matrices_.size(); ++next) {  // those this range holds nothing of, after the last
    u.clear();
    finish(matrices_[next]);
  }
}

std::pair<std::vector<float>, std::vector<float>> Muon::state_over_range() const {
  std::vector<float> adamw_m(adamw_state_->elements()), adamw_v(adamw_state_->elements()),
      buf(momentum_->elements());
  adamw_state_->read_all({adamw_m.data(), adamw_v.data()});
  momentum_->read_all({buf.data()});
  std::vector<float> m(range_.size(), 0.0f), v(range_.size(), 0.0f);
  for (const AdamWRun& run : adamw_) {
    const auto at = static_cast<std::ptrdiff_t>(run.at);
    const auto to = static_cast<std::ptrdiff_t>(run.elements.begin);
    const auto n = static_cast<std::ptrdiff_t>(run.elements.size());
    std::copy(adamw_m.begin() + at, adamw_m.begin() + at + n, m.begin() + to);
    std::copy(adamw_v.begin() + at, adamw_v.begin() + at + n, v.begin() + to);
  }
  for (const Matrix& mat : matrices_)
    std::copy_n(buf.begin() + static_cast<std::ptrdiff_t>(mat.momentum_at), mat.held.size(),
                m.begin() + static_cast<std::ptrdiff_t>(mat.held.begin - range_.begin));
  return {std::move(m), std::move(v)};
}

std::vector<StateBuffer> Muon::save() const {
  auto [m, v] = state_over_range();
  return {{"m", range_, std::move(m)}, {"v", range_, std::move(v)}};
}

void Muon::load(const std::vector<StateBuffer>& buffers) {
  // Only the buffers given are replaced.
  auto [m, v] = state_over_range();
  load_state_values(buffers, {{"m", &m}, {"v", &v}}, "Muon");
  std::vector<float> adamw_m(adamw_state_->elements()), adamw_v(adamw_state_->elements()),
      buf(momentum_->elements());
  for (const AdamWRun& run : adamw_) {
    const auto from = static_cast<std::ptrdiff_t>(run.elements.begin);
    const auto n = static_cast<std::ptrdiff_t>(run.elements.size());
    std::copy(m.begin() + from, m.begin() + from + n,
              adamw_m.begin() + static_cast<std::ptrdiff_t>(run.at));
    std::copy(v.begin() + from, v.begin() + from + n,
              adamw_v.begin() + static_cast<std::ptrdiff_t>(run.at));
  }
  for (const Matrix& mat : matrices_)
    std::copy_n(m.begin() + static_cast<std::ptrdiff_t>(mat.held.begin - range_.begin),
                mat.held.size(), buf.begin() + static_cast<std::ptrdiff_t>(mat.momentum_at));
  adamw_state_->write_all({adamw_m.data(), adamw_v.data()});
  momentum_->write_all({buf.data()});
}

std::size_t Muon::state_bytes() const {
  return adamw_state_->resident_bytes() + momentum_->resident_bytes();
}

}  // namespace strata

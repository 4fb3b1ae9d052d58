#include "train/optimizer/muon.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "model/core/error.h"
#include "model/kernels/cpu/adamw.h"
#include "plan/optimizer_state.h"
#include "train/optimizer/newton_schulz.h"

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
  std::size_t v_size = 0;
  for (const TensorView& t : layout.tensors()) {
    const ElementRange elements{t.offset, t.offset + t.size};
    const ElementRange held = intersect(elements, range_);
    if (muon_updates(t)) {
      Matrix m;
      m.slice = t.slice;
      m.elements = elements;
      m.held = held;
      m.rows = static_cast<int>(t.slice.logical_shape.at(0));
      m.cols = static_cast<int>(t.slice.logical_shape.at(1));
      m.split = !t.slice.is_whole();
      for (const ElementRange& o : owners) m.owner_counts.push_back(intersect(elements, o).size());
      matrices_.push_back(std::move(m));
    } else if (!held.empty()) {
      adamw_.push_back({{held.begin - range_.begin, held.end - range_.begin}, v_size, t.decay});
      v_size += held.size();
    }
  }
  m_.assign(range_.size(), 0.0f);
  v_.assign(v_size, 0.0f);
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
  for (const AdamWRun& run : adamw_) {
    hyper.weight_decay = run.decay ? static_cast<float>(config_.weight_decay) : 0.0f;
    const std::size_t at = run.elements.begin;
    cpu::adamw_update(params + at, grads + at, m_.data() + at, v_.data() + run.v_at,
                      static_cast<long>(run.elements.size()), hyper);
  }

  const MuonConfig& muon = config_.muon;
  const float momentum = static_cast<float>(muon.momentum);
  const double lr = muon.lr * step.lr / config_.lr;
  const float decay = static_cast<float>(1.0 - lr * config_.weight_decay);
  for (const Matrix& m : matrices_) {
    std::vector<float> u(m.held.size());
    for (std::size_t e = m.held.begin; e < m.held.end; ++e) {
      const std::size_t i = e - range_.begin;
      const float g = grads[i] * grad_scale;
      m_[i] = momentum * m_[i] + g;
      u[e - m.held.begin] = muon.nesterov ? g + momentum * m_[i] : m_[i];
    }
    std::vector<float> local = gather_owners(m, u);
    // The tp ranks of a group hold the same parts of their slices: all skip, or none.
    if (m.held.empty()) continue;
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
  }
}

std::vector<StateBuffer> Muon::save() const {
  std::vector<float> v(range_.size(), 0.0f);
  for (const AdamWRun& run : adamw_)
    std::copy_n(v_.begin() + static_cast<std::ptrdiff_t>(run.v_at), run.elements.size(),
                v.begin() + static_cast<std::ptrdiff_t>(run.elements.begin));
  return {{"m", range_, m_}, {"v", range_, std::move(v)}};
}

void Muon::load(const std::vector<StateBuffer>& buffers) {
  std::vector<float> m = m_, v(range_.size(), 0.0f);
  load_state_values(buffers, {{"m", &m}, {"v", &v}}, "Muon");
  m_ = std::move(m);
  const bool has_v = std::any_of(buffers.begin(), buffers.end(),
                                 [](const StateBuffer& b) { return b.name == "v"; });
  if (!has_v) return;
  for (const AdamWRun& run : adamw_)
    std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(run.elements.begin), run.elements.size(),
                v_.begin() + static_cast<std::ptrdiff_t>(run.v_at));
}

std::size_t Muon::state_bytes() const { return (m_.size() + v_.size()) * sizeof(float); }

}  // namespace strata

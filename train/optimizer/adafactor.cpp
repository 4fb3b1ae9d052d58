#include "train/optimizer/adafactor.h"

#include <algorithm>
#include <cmath>

#include "model/core/error.h"
#include "model/kernels/adafactor_element.h"
#include "train/optimizer/tensor_parts.h"

namespace strata {

Adafactor::Adafactor(const ParameterLayout& layout, ElementRange range,
                     const OptimizerConfig& config, OptimizerGroups groups)
    : range_(range), config_(config), groups_(groups) {
  // wte first (its own section), then the whole tensors, then the split ones.
  std::size_t sums = 0, norms = 0;
  for (const TensorPart& part : tensor_parts(layout, range_, TensorOrder::wte_whole_split)) {
    const TensorView* view = part.view;
    Tensor t;
    t.slice = view->slice;
    t.elements = part.elements;
    t.held = part.held;
    const std::vector<std::int64_t>& shape = view->slice.logical_shape;
    STRATA_CHECK(shape.size() == 1 || shape.size() == 2, "Adafactor: tensor '", view->name,
                 "' is neither a vector nor a matrix");
    t.matrix = part.matrix();
    t.rows = t.matrix ? shape[0] : 1;
    t.cols = t.matrix ? shape[1] : shape[0];
    t.decay = view->decay;
    t.split = part.split;
    t.sums_at = sums;
    t.norms_at = norms;
    sums += static_cast<std::size_t>(t.matrix ? t.rows + t.cols : t.cols);
    norms += 2;
    if (!t.held.empty()) {
      if (t.matrix) {
        t.stats_at = row_.size();
        t.col_at = col_.size();
        row_.resize(row_.size() + static_cast<std::size_t>(t.rows), 0.0f);
        col_.resize(col_.size() + static_cast<std::size_t>(t.cols), 0.0f);
        row_stats_.push_back({view->name, t.rows});
        col_stats_.push_back({view->name, t.cols});
      } else {
        t.stats_at = v_.size();
        v_.resize(v_.size() + static_cast<std::size_t>(t.cols), 0.0f);
        v_stats_.push_back({view->name, t.cols});
      }
    }
    if (view->name == "wte") {
      sums_sections_.wte_end = sums;
      norms_sections_.wte_end = norms;
    }
    if (!t.split || view->name == "wte") {
      sums_sections_.split_begin = sums;
      norms_sections_.split_begin = norms;
    }
    tensors_.push_back(t);
  }
  sums_.assign(sums, 0.0);
  norms_.assign(norms, 0.0);
  // m (with beta1 > 0) where optimizer.offload keeps it; without m, nothing to keep but the
  // visit's chunks.
  const std::vector<ChunkedPart> parts = chunked_parts(layout, range_, config_);
  m_ = parts.empty() ? ChunkedState::make(OptimizerOffload::none, range_.size(), {}, 0, "")
                     : make_chunked_state(parts[0], config_);
}

void Adafactor::sum_over_groups(std::vector<double>& values, const Sections& sections) const {
  const std::size_t wte = sections.wte_end, split = sections.split_begin;
  if (groups_.owners) {
    if (wte > 0) groups_.owners->all_reduce_sum(values.data(), wte);
    if (values.size() > wte)
      groups_.owners->all_reduce_sum(values.data() + wte, values.size() - wte);
  }
  if (groups_.tp) {
    const bool wte_split = wte > 0 && tensors_.front().split;
    if (wte_split) groups_.tp->all_reduce_sum(values.data(), wte);
    if (values.size() > split)
      groups_.tp->all_reduce_sum(values.data() + split, values.size() - split);
  }
}

void Adafactor::add_squares(const Tensor& t, const float* grads, float grad_scale) {
  double* sums = sums_.data() + t.sums_at;
  for (std::size_t e = t.held.begin; e < t.held.end; ++e) {
    const float g = grads[e - range_.begin] * grad_scale;
    const double g2 = static_cast<double>(g) * g;
    const std::int64_t logical =
        t.slice.logical_index(static_cast<std::int64_t>(e - t.elements.begin));
    if (t.matrix) {
      sums[logical / t.cols] += g2;
      sums[t.rows + logical % t.cols] += g2;
    } else {
      sums[logical] += g2;
    }
  }
}

float Adafactor::update_statistics(const Tensor& t, float weight) {
  const double* sums = sums_.data() + t.sums_at;
  if (!t.matrix) {
    float* v = v_.data() + t.stats_at;
    for (std::int64_t i = 0; i < t.cols; ++i)
      v[i] = adafactor_ema(v[i], static_cast<float>(sums[i]), weight);
    return 1.0f;
  }
  float* row = row_.data() + t.stats_at;
  float* col = col_.data() + t.col_at;
  double row_total = 0;
  for (std::int64_t i = 0; i < t.rows; ++i) {
    row[i] =
        adafactor_ema(row[i], static_cast<float>(sums[i] / static_cast<double>(t.cols)), weight);
    row_total += row[i];
  }
  for (std::int64_t j = 0; j < t.cols; ++j)
    col[j] = adafactor_ema(
        col[j], static_cast<float>(sums[t.rows + j] / static_cast<double>(t.rows)), weight);
  const float mean = static_cast<float>(row_total / static_cast<double>(t.rows));
  return std::max(mean, static_cast<float>(config_.adafactor.eps1));
}

float Adafactor::variance(const Tensor& t, std::int64_t logical, float row_mean) const {
  if (!t.matrix) return v_[t.stats_at + static_cast<std::size_t>(logical)];
  return adafactor_variance(row_[t.stats_at + static_cast<std::size_t>(logical / t.cols)],
                            col_[t.col_at + static_cast<std::size_t>(logical % t.cols)], row_mean);
}

void Adafactor::update(float* params, const float* grads, const OptimizerStep& step) {
  const AdafactorConfig& a = config_.adafactor;
  const float grad_scale = static_cast<float>(step.grad_scale);
  const double t_count = static_cast<double>(step.count);
  const float weight = static_cast<float>(std::pow(t_count, a.decay_rate));  // 1 − β2_t
  const float eps1_squared = static_cast<float>(a.eps1 * a.eps1);

  std::fill(sums_.begin(), sums_.end(), 0.0);
  for (const Tensor& t : tensors_)
    if (!t.held.empty()) add_squares(t, grads, grad_scale);
  sum_over_groups(sums_, sums_sections_);

  std::vector<float> row_means(tensors_.size(), 1.0f);
  std::fill(norms_.begin(), norms_.end(), 0.0);
  for (std::size_t k = 0; k < tensors_.size(); ++k) {
    const Tensor& t = tensors_[k];
    if (t.held.empty()) continue;
    row_means[k] = update_statistics(t, weight);
    double u2 = 0, p2 = 0;
    for (std::size_t e = t.held.begin; e < t.held.end; ++e) {
      const std::int64_t logical =
          t.slice.logical_index(static_cast<std::int64_t>(e - t.elements.begin));
      const float u = adafactor_update(grads[e - range_.begin] * grad_scale,
                                       variance(t, logical, row_means[k]), eps1_squared);
      u2 += static_cast<double>(u) * u;
      const float p = params[e - range_.begin];
      p2 += static_cast<double>(p) * p;
    }
    norms_[t.norms_at] = u2;
    norms_[t.norms_at + 1] = p2;
  }
  sum_over_groups(norms_, norms_sections_);

  const double lr = step.lr;
  std::vector<AdafactorStep> steps(tensors_.size());
  for (std::size_t k = 0; k < tensors_.size(); ++k) {
    const Tensor& t = tensors_[k];
    if (t.held.empty()) continue;
    const double size = static_cast<double>(t.slice.logical_size());
    const double rms_u = std::sqrt(norms_[t.norms_at] / size);
    double alpha = lr;
    if (a.relative_step)
      alpha = std::max(a.eps2, std::sqrt(norms_[t.norms_at + 1] / size)) *
              std::min(lr, 1.0 / std::sqrt(t_count));
    steps[k] = {static_cast<float>(alpha),
                static_cast<float>(std::max(1.0, rms_u / a.clip_threshold)),
                t.decay ? static_cast<float>(1.0 - lr * config_.weight_decay) : 1.0f,
                static_cast<float>(a.beta1)};
  }
  // The update, chunk by chunk of m: each tensor's elements in the chunk.
  m_->visit([&](const ChunkedState::Chunk& c) {
    const ElementRange chunk{range_.begin + c.first, range_.begin + c.first + c.count};
    float* m = m_->widths().empty() ? nullptr : c.plane<float>(0);
    for (std::size_t k = 0; k < tensors_.size(); ++k) {
      const Tensor& t = tensors_[k];
      const ElementRange part = intersect(t.held, chunk);
      for (std::size_t e = part.begin; e < part.end; ++e) {
        const std::size_t i = e - range_.begin;
        const std::int64_t logical =
            t.slice.logical_index(static_cast<std::int64_t>(e - t.elements.begin));
        const float u = adafactor_update(grads[i] * grad_scale, variance(t, logical, row_means[k]),
                                         eps1_squared);
        adafactor_apply(params[i], m ? m + (i - c.first) : nullptr, u, steps[k]);
      }
    }
    test_kill_in_update(step, c.first);
  });
}

std::vector<StateBuffer> Adafactor::save() const {
  std::vector<StateBuffer> buffers;
  if (!m_->widths().empty()) {
    std::vector<float> m(range_.size());
    m_->read_all({m.data()});
    buffers.push_back({"m", range_, std::move(m)});
  }
  // A rank holding no matrix (or no vector) has an empty buffer of that kind: the buffer is kept
  // so that every rank names the same buffers.
  buffers.push_back({"row", {}, row_, true, row_stats_});
  buffers.push_back({"col", {}, col_, true, col_stats_});
  buffers.push_back({"v", {}, v_, true, v_stats_});
  return buffers;
}

void Adafactor::load(const std::vector<StateBuffer>& buffers) {
  std::vector<std::pair<std::string, std::vector<float>*>> held{
      {"row", &row_}, {"col", &col_}, {"v", &v_}};
  std::vector<float> m;
  if (!m_->widths().empty()) {
    m.resize(range_.size());
    m_->read_all({m.data()});
    held.emplace_back("m", &m);
  }
  load_state_values(buffers, held, "Adafactor");
  if (!m.empty()) m_->write_all({m.data()});
}

std::size_t Adafactor::state_bytes() const {
  return (row_.size() + col_.size() + v_.size()) * sizeof(float) + m_->resident_bytes();
}

}  // namespace strata

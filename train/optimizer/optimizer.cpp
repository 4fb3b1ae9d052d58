#include "train/optimizer/optimizer.h"

#include <algorithm>
#include <cmath>

#include "model/core/error.h"
#include "model/kernels/cpu/adamw.h"
#include "train/optimizer/adafactor.h"
#include "train/optimizer/adamw8bit.h"
#include "train/optimizer/muon.h"

namespace strata {

AdamW::AdamW(const ParameterLayout& layout, ElementRange range, const OptimizerConfig& config)
    : range_(range),
      config_(config),
      decayed_(restrict_to(layout.decayed_ranges(), range)),
      m_(range.size(), 0.0f),
      v_(range.size(), 0.0f) {}

std::vector<StateBuffer> AdamW::save() const { return {{"m", range_, m_}, {"v", range_, v_}}; }

void AdamW::load(const std::vector<StateBuffer>& buffers) {
  load_state_values(buffers, {{"m", &m_}, {"v", &v_}}, "AdamW");
}

std::vector<StateBuffer> Optimizer::shapes() const {
  std::vector<StateBuffer> buffers = save();
  for (StateBuffer& b : buffers) b.values = {};
  return buffers;
}

void load_state_values(const std::vector<StateBuffer>& buffers,
                       const std::vector<std::pair<std::string, std::vector<float>*>>& held,
                       const char* optimizer) {
  for (const StateBuffer& b : buffers) {
    const auto it =
        std::find_if(held.begin(), held.end(), [&](const auto& h) { return h.first == b.name; });
    if (it == held.end() || it->second->size() != b.values.size())
      fail("optimizer state '", b.name, "' of ", b.values.size(), " values does not fit ",
           optimizer, "'s state");
    *it->second = b.values;
  }
}

cpu::AdamWHyper adamw_hyper(const OptimizerConfig& config, const OptimizerStep& step) {
  return {static_cast<float>(step.lr),
          static_cast<float>(config.beta1),
          static_cast<float>(config.beta2),
          static_cast<float>(config.eps),
          0.0f,
          step.count,
          static_cast<float>(step.grad_scale)};
}

void AdamW::update(float* params, const float* grads, const OptimizerStep& step) {
  cpu::AdamWHyper hyper = adamw_hyper(config_, step);
  // Alternate runs without and with decay, in element order.
  auto run = [&](std::size_t begin, std::size_t end, float decay) {
    if (end <= begin) return;
    hyper.weight_decay = decay;
    cpu::adamw_update(params + begin, grads + begin, m_.data() + begin, v_.data() + begin,
                      static_cast<long>(end - begin), hyper);
  };
  std::size_t next = 0;
  for (const ElementRange& r : decayed_) {
    run(next, r.begin, 0.0f);
    run(r.begin, r.end, static_cast<float>(config_.weight_decay));
    next = r.end;
  }
  run(next, range_.size(), 0.0f);
}

std::unique_ptr<Optimizer> make_optimizer(const ParameterLayout& layout, ElementRange range,
                                          const OptimizerConfig& config, OptimizerGroups groups) {
  switch (config.name) {
    case OptimizerName::adamw:
      return std::make_unique<AdamW>(layout, range, config);
    case OptimizerName::adafactor:
      return std::make_unique<Adafactor>(layout, range, config, groups);
    case OptimizerName::adamw8bit:
      return std::make_unique<AdamW8bit>(layout, range, config, groups);
    case OptimizerName::muon:
      return std::make_unique<Muon>(layout, range, config, groups);
  }
  return nullptr;
}

double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm) || norm <= max_norm) return 1.0;
  return max_norm / norm;
}

}  // namespace strata

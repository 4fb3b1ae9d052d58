#include "train/optimizer/optimizer.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>

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
      state_(make_chunked_state(chunked_parts(layout, range, config).at(0), config)) {}

std::vector<StateBuffer> AdamW::save() const {
  std::vector<float> m(range_.size()), v(range_.size());
  state_->read_all({m.data(), v.data()});
  return {{"m", range_, std::move(m)}, {"v", range_, std::move(v)}};
}

void AdamW::load(const std::vector<StateBuffer>& buffers) {
  std::vector<float> m(range_.size()), v(range_.size());
  state_->read_all({m.data(), v.data()});
  load_state_values(buffers, {{"m", &m}, {"v", &v}}, "AdamW");
  state_->write_all({m.data(), v.data()});
}

std::unique_ptr<ChunkedState> make_chunked_state(const ChunkedPart& part,
                                                 const OptimizerConfig& config) {
  return ChunkedState::make(config.offload, part.elements, part.widths,
                            static_cast<std::size_t>(config.offload_chunk), config.offload_dir);
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

void test_kill_in_update(const OptimizerStep& step, std::size_t chunk_first) {
  if (step.test_kill_after_first_chunk && chunk_first > 0) std::raise(SIGKILL);
}

void AdamW::update(float* params, const float* grads, const OptimizerStep& step) {
  cpu::AdamWHyper hyper = adamw_hyper(config_, step);
  // Chunk by chunk of the state; in each, alternate runs without and with decay, in element order.
  state_->visit([&](const ChunkedState::Chunk& c) {
    const std::size_t first = c.first;
    const ElementRange chunk{first, first + c.count};
    float* m = c.plane<float>(0);
    float* v = c.plane<float>(1);
    auto run = [&](std::size_t begin, std::size_t end, float decay) {
      const ElementRange part = intersect({begin, end}, chunk);
      if (part.empty()) return;
      hyper.weight_decay = decay;
      cpu::adamw_update(params + part.begin, grads + part.begin, m + (part.begin - first),
                        v + (part.begin - first), static_cast<long>(part.size()), hyper);
    };
    std::size_t next = 0;
    for (const ElementRange& r : decayed_) {
      run(next, r.begin, 0.0f);
      run(r.begin, r.end, static_cast<float>(config_.weight_decay));
      next = r.end;
    }
    run(next, range_.size(), 0.0f);
    test_kill_in_update(step, first);
  });
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

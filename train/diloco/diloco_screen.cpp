// The screen before each sync's averaging and the test hook that makes a worker misbehave
// (train/diloco/diloco.h "Robust averaging"; docs/ARCHITECTURE.md §2).
#include <cmath>
#include <limits>

#include "model/core/counter_rng.h"
#include "train/diloco/diloco.h"
#include "train/diloco/diloco_sync.h"

namespace strata {

void Diloco::poison(Sync& sync) const {
  if (test_poison_ == TestHooks::Poison::none || sync.dropped ||
      (test_poison_worker_ >= 0 && test_poison_worker_ != placement_.worker))
    return;
  const std::vector<ElementRange>& pieces = pieces_[static_cast<std::size_t>(sync.report.fragment)];
  const std::uint64_t key = hash_combine(hash_combine(seed_, hash_name("diloco/poison")),
                                         static_cast<std::uint64_t>(sync.report.step));
  for (std::size_t p = 0; p < pieces.size(); ++p) {
    std::vector<float>& values = sync.values[p];
    if (values.empty()) continue;
    const float* anchor = optimizer_.anchor().data() + (pieces[p].begin - placement_.share.begin);
    // The outer gradient as sent: anchor − θ uncompressed, the values themselves compressed.
    const bool of_theta = compression_ == OuterCompression::none;
    auto delta = [&](std::size_t i) { return of_theta ? anchor[i] - values[i] : values[i]; };
    auto set_delta = [&](std::size_t i, double d) {
      values[i] = static_cast<float>(of_theta ? anchor[i] - d : d);
    };
    double squares = 0;
    for (std::size_t i = 0; i < values.size(); ++i) squares += delta(i) * delta(i);
    const double sigma = 3 * std::sqrt(squares / static_cast<double>(values.size()));
    for (std::size_t i = 0; i < values.size(); ++i) {
      switch (test_poison_) {
        case TestHooks::Poison::nan:
          if (i == 0) values[i] = std::numeric_limits<float>::quiet_NaN();
          break;
        case TestHooks::Poison::scale:
          set_delta(i, 1e3 * delta(i));
          break;
        case TestHooks::Poison::noise:
          set_delta(i, delta(i) + sigma * counter_normal(key, pieces[p].begin + i));
          break;
        case TestHooks::Poison::none:
          break;
      }
    }
  }
}

void Diloco::screen(Sync& sync) const {
  const int k = placement_.workers;
  sync.round.excluded.assign(static_cast<std::size_t>(k), false);
  sync.report.left_out.clear();
  std::vector<double> norms(static_cast<std::size_t>(k));
  placement_.outer->all_gather(&sync.own_norm, norms.data(), 1);
  std::vector<int> judged;  // the members that would contribute: not dropped, not joining
  std::vector<double> judged_norms;
  for (int w = 0; w < k; ++w)
    if (!sync.round.dropped[static_cast<std::size_t>(w)]) {
      judged.push_back(w);
      judged_norms.push_back(norms[static_cast<std::size_t>(w)]);
    }
  const std::vector<MemberScreen> screens = screen_norms(judged_norms, config_.outlier_factor);
  for (std::size_t i = 0; i < judged.size(); ++i) {
    if (screens[i].kept) continue;
    sync.round.excluded[static_cast<std::size_t>(judged[i])] = true;
    sync.report.left_out.push_back({judged[i], screens[i].why});
  }
}

}  // namespace strata

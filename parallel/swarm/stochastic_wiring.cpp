#include "parallel/swarm/stochastic_wiring.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace strata {

StageWiring::StageWiring(const WiringSettings& settings) : settings_(settings) {}

double StageWiring::entry_busy() const {
  std::optional<double> least_in_good_standing, least;
  for (const auto& [id, peer] : peers_) {
    if (!least || peer.busy < *least) least = peer.busy;
    if (peer.banned_until < 0 && (!least_in_good_standing || peer.busy < *least_in_good_standing))
      least_in_good_standing = peer.busy;
  }
  return least_in_good_standing.value_or(least.value_or(0.0));
}

void StageWiring::set_peers(const std::vector<std::int64_t>& peers) {
  std::vector<std::int64_t> order = peers;
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());

  std::erase_if(peers_, [&](const auto& entry) {
    return !std::binary_search(order.begin(), order.end(), entry.first);
  });
  // Measured against the peers that stay, before any newcomer counts among them.
  const double entry = entry_busy();
  for (const std::int64_t id : order)
    if (!peers_.contains(id)) peers_[id].busy = entry;
  order_ = std::move(order);
}

void StageWiring::return_from_bans(double now) {
  const double entry = entry_busy();
  for (auto& [id, peer] : peers_) {
    if (peer.banned_until < 0 || now < peer.banned_until) continue;
    // The others kept working while it was banned; at its old busy time it would take every piece
    // until it caught up with them.
    peer.busy = std::max(peer.busy, entry);
    peer.banned_until = -1;
  }
}

std::optional<WiringChoice> StageWiring::choose(StageWork work, int samples, std::int64_t sequence,
                                                const std::vector<std::int64_t>& excluded,
                                                double now) {
  return_from_bans(now);
  const auto available = [&](std::int64_t id) {
    return !banned(id, now) && std::find(excluded.begin(), excluded.end(), id) == excluded.end();
  };
  const double units = samples * (work == StageWork::backward ? settings_.backward_cost : 1.0);

  std::optional<std::int64_t> chosen;
  if (settings_.routing == SwarmRouting::fixed) {
    const auto count = static_cast<std::int64_t>(order_.size());
    const std::int64_t first = count > 0 ? (sequence % count + count) % count : 0;
    for (std::int64_t step = 0; step < count && !chosen; ++step) {
      const std::int64_t id = order_[static_cast<std::size_t>((first + step) % count)];
      if (available(id)) chosen = id;
    }
  } else {
    double earliest_end = 0;
    for (const std::int64_t id : order_) {
      if (!available(id)) continue;
      const double end = peers_.at(id).busy + units * seconds_per_unit(id);
      if (!chosen || end < earliest_end) {
        chosen = id;
        earliest_end = end;
      }
    }
  }
  if (!chosen) return std::nullopt;

  const WiringChoice choice{*chosen, units, units * seconds_per_unit(*chosen)};
  peers_.at(*chosen).busy += choice.expected_seconds;
  return choice;
}

void StageWiring::finished(const WiringChoice& choice, double seconds) {
  const auto found = peers_.find(choice.peer);
  // A peer that has left since, or a measurement that says nothing about speed (no work, or a
  // clock that did not advance), changes nothing.
  if (found == peers_.end() || !(choice.units > 0) || !(seconds > 0) || !std::isfinite(seconds))
    return;
  if (found->second.measured++ < settings_.warmup) return;
  const double measured = seconds / choice.units;
  double& speed = found->second.seconds_per_unit;
  speed = speed > 0 ? (1 - settings_.ema) * speed + settings_.ema * measured : measured;
}

void StageWiring::failed(const WiringChoice& choice, double now) {
  const auto found = peers_.find(choice.peer);
  if (found != peers_.end()) found->second.banned_until = now + settings_.ban_s;
}

bool StageWiring::banned(std::int64_t peer, double now) const {
  const auto found = peers_.find(peer);
  return found != peers_.end() && now < found->second.banned_until;
}

double StageWiring::mean_measured_seconds_per_unit() const {
  double sum = 0;
  int measured = 0;
  for (const auto& [id, peer] : peers_) {
    if (peer.seconds_per_unit > 0) {
      sum += peer.seconds_per_unit;
      ++measured;
    }
  }
  return measured > 0 ? sum / measured : 1.0;
}

double StageWiring::seconds_per_unit(std::int64_t peer) const {
  const auto found = peers_.find(peer);
  if (found != peers_.end() && found->second.seconds_per_unit > 0)
    return found->second.seconds_per_unit;
  return mean_measured_seconds_per_unit();
}

double StageWiring::throughput(double now) const {
  double units_per_second = 0;
  for (const std::int64_t id : order_)
    if (!banned(id, now)) units_per_second += 1 / seconds_per_unit(id);
  return units_per_second;
}

double StageWiring::busy(std::int64_t peer) const {
  const auto found = peers_.find(peer);
  if (found == peers_.end())
    throw std::invalid_argument("StageWiring::busy: peer " + std::to_string(peer) +
                                " is not one of the stage's peers");
  return found->second.busy;
}

}  // namespace strata

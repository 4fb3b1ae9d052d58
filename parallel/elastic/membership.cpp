#include "parallel/elastic/membership.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "parallel/elastic/record_signing.h"
#include "parallel/elastic/signed_store.h"

namespace strata {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void sleep_seconds(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

double heartbeat_period(double timeout_s) { return std::clamp(timeout_s / 10, 0.1, 2.0); }

std::string member_token() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::random_device random;
  return std::string(host) + ":" + std::to_string(getpid()) + ":" + std::to_string(random());
}

void check_shared_settings(RendezvousStore& store, const std::string& key, const std::string& mine,
                           const std::function<std::string(const std::string&)>& difference,
                           const std::string& what) {
  auto* const signed_store = dynamic_cast<SignedStore*>(&store);
  if (signed_store != nullptr ? signed_store->create_here(key, store_bytes(mine))
                              : store.create(key, store_bytes(mine)))
    return;
  const auto stored = store.get(key);
  if (signed_store != nullptr && !stored)
    throw std::runtime_error(what +
                             ": its settings are not signed with this member's secret (its "
                             "secret_file holds another secret, or the group has none)");
  if (signed_store == nullptr && stored && looks_signed(*stored))
    throw std::runtime_error(what +
                             ": the group is authenticated (its records are signed); this member "
                             "needs the group's secret (secret_file)");
  const std::string theirs = stored ? store_text(*stored) : "";
  if (theirs == mine) return;
  const std::string why = difference ? difference(theirs) : "settings differ";
  if (!why.empty()) throw std::runtime_error(what + ": " + why);
}

HeartbeatThread::HeartbeatThread(RendezvousStore& store, std::function<std::string()> key,
                                 double timeout_s)
    : store_(store), key_(std::move(key)), timeout_s_(timeout_s) {
  thread_ = std::thread([this] { run(); });
}

void HeartbeatThread::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void HeartbeatThread::run() {
  std::int64_t count = 0;
  bool warned = false;
  while (!stopping_) {
    try {
      store_.set(key_(), store_bytes(std::to_string(++count)));
      if (warned) std::fprintf(stderr, "warning: the rendezvous store answers again\n");
      warned = false;
    } catch (const StoreUnavailable& e) {
      if (!warned)
        std::fprintf(stderr, "warning: heartbeat failed (%s); training goes on, retrying\n",
                     e.what());
      warned = true;
    }
    const double until = steady_seconds() + heartbeat_period(timeout_s_);
    while (!stopping_ && steady_seconds() < until) sleep_seconds(0.02);
  }
}

bool SilenceWatch::silent(const std::string& key, const std::string& value) {
  const double now = steady_seconds();
  Observed& o = observed_[key];
  if (o.since == 0 || moved(o.value, value)) o = {value, now};
  return now - o.since >= timeout_s_;
}

bool SilenceWatch::moved(const std::string& before, const std::string& now) {
  // A heartbeat counts up: an earlier value put back (a store writer replaying a record) is not
  // life. Values that are not counters move when they change.
  std::int64_t a = 0, b = 0;
  const auto [end_a, error_a] = std::from_chars(before.data(), before.data() + before.size(), a);
  const auto [end_b, error_b] = std::from_chars(now.data(), now.data() + now.size(), b);
  if (error_a == std::errc() && error_b == std::errc() && end_a == before.data() + before.size() &&
      end_b == now.data() + now.size())
    return b > a;
  return now != before;
}

bool SilenceWatch::silent(RendezvousStore& store, const std::string& key) {
  const auto value = store.get(key);
  return silent(key, value ? store_text(*value) : "");
}

}  // namespace strata

#include "parallel/elastic/elastic_group.h"

#include "model/core/error.h"
#include "parallel/elastic/signed_store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace strata {

namespace {

// The store's name of attempt `attempt` of the sync after inner step `step`.
std::string sync_name(std::int64_t step, int attempt) {
  return std::to_string(step) + (attempt > 0 ? "." + std::to_string(attempt) : "");
}

// A store that stops answering during one wait: warns once, says when it has been silent for the
// timeout, and says so when it answers again.
class StoreOutage {
 public:
  explicit StoreOutage(double timeout_s) : timeout_s_(timeout_s) {}
  // After a call that failed (`when`: what the worker was doing): true once the timeout passed.
  bool expired(const StoreUnavailable& e, const std::string& when) {
    const double now = steady_seconds();
    if (since_ < 0) {
      since_ = now;
      std::fprintf(stderr,
                   "warning: the rendezvous store does not answer %s (%s); retrying for %g s\n",
                   when.c_str(), e.what(), timeout_s_);
    }
    return now - since_ >= timeout_s_;
  }
  // After a call that succeeded.
  void answered() {
    if (since_ >= 0) std::fprintf(stderr, "warning: the rendezvous store answers again\n");
    since_ = -1;
  }

 private:
  double timeout_s_;
  double since_ = -1;
};

}  // namespace

int SyncMembers::index_of(int slot) const {
  const auto at = std::find(slots.begin(), slots.end(), slot);
  return at == slots.end() ? -1 : static_cast<int>(at - slots.begin());
}

std::string SyncMembers::text() const {
  std::ostringstream out;
  out << "step " << step << "\ngroup_step " << group_step << "\nmembers";
  for (std::size_t i = 0; i < slots.size(); ++i)
    out << " " << slots[i] << ":" << holders[i] << ":" << (joining[i] ? 1 : 0);
  if (attempt > 0) out << "\nattempt " << attempt;
  if (group_attempt > 0) out << "\ngroup_attempt " << group_attempt;
  out << "\nlost";
  for (int slot : lost) out << " " << slot;
  out << "\n";
  if (alone) out << "alone\n";
  if (own_slot >= 0) out << "own_slot " << own_slot << "\n";
  return out.str();
}

SyncMembers SyncMembers::parse(const std::string& text) {
  SyncMembers m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    if (name == "step") {
      words >> m.step;
    } else if (name == "group_step") {
      words >> m.group_step;
    } else if (name == "attempt") {
      words >> m.attempt;
      if (m.attempt < 0) fail("malformed sync membership: attempt ", m.attempt, " in the store");
    } else if (name == "group_attempt") {
      words >> m.group_attempt;
      if (m.group_attempt < 0)
        fail("malformed sync membership: group_attempt ", m.group_attempt, " in the store");
    } else if (name == "members") {
      std::string member;
      while (words >> member) {
        int slot = 0, joining = 0;
        long long holder = 0;
        char tail = 0;
        if (std::sscanf(member.c_str(), "%d:%lld:%d%c", &slot, &holder, &joining, &tail) != 3 ||
            slot < 0 || holder < 0 || (!m.slots.empty() && slot <= m.slots.back()))
          fail("malformed sync membership '", member, "' in the store");
        m.slots.push_back(slot);
        m.holders.push_back(holder);
        m.joining.push_back(joining != 0);
      }
    } else if (name == "lost") {
      int slot = 0;
      while (words >> slot) m.lost.push_back(slot);
    } else if (name == "alone") {
      m.alone = true;
    } else if (name == "own_slot") {
      words >> m.own_slot;
      if (m.own_slot < -1)
        fail("malformed sync membership: own_slot ", m.own_slot, " in the store");
    }
  }
  return m;
}

ElasticGroup::ElasticGroup(const ElasticGroupSettings& settings)
    : settings_(settings), watch_(settings.timeout_s) {
  if (settings_.group.empty()) throw std::runtime_error("diloco.group is empty");
  store_ =
      open_group_store(settings_.store_url, settings_.secret, std::min(settings_.timeout_s, 10.0));
  check_shared_settings(*store_, key("settings"), settings_.shared_settings, settings_.difference,
                        "group '" + settings_.group + "' (" + store_->url() + ")");
  take_slot();
  heartbeat_ = std::make_unique<HeartbeatThread>(
      *store_, [this] { return heartbeat_key(); }, settings_.timeout_s);
}

ElasticGroup::~ElasticGroup() { leave("exit"); }

std::int64_t ElasticGroup::newest_holder(int slot) {
  // Generations only grow: probe upwards from the newest one seen (reads of single keys, not a
  // listing, which on Redis scans the whole store).
  std::int64_t& newest = newest_seen_.try_emplace(slot, -1).first->second;
  while (store_->get(key("claim/" + std::to_string(slot) + "/" + std::to_string(newest + 1))))
    ++newest;
  return newest;
}

bool ElasticGroup::is_dead(int slot, std::int64_t generation) {
  return store_->get(key("dead/" + std::to_string(slot) + "/" + std::to_string(generation)))
      .has_value();
}

void ElasticGroup::take_slot() {
  const std::string token = member_token();
  std::vector<int> candidates;
  if (settings_.slot >= 0) {
    if (settings_.slot >= settings_.slots)
      throw std::runtime_error("diloco.slot " + std::to_string(settings_.slot) +
                               " is not a slot of a group of " + std::to_string(settings_.slots) +
                               " (diloco.workers)");
    candidates.push_back(settings_.slot);
  } else {
    for (int w = 0; w < settings_.slots; ++w) candidates.push_back(w);
  }
  // Free slots first (never held, or left with a deathrattle); then the silent ones: a holder
  // killed without a deathrattle is found by watching its heartbeat for the timeout.
  const double start = steady_seconds();
  while (true) {
    std::map<int, std::int64_t> silent;
    for (int w : candidates) {
      const std::int64_t g = newest_holder(w);
      const bool free = g < 0 || is_dead(w, g);
      if (free && store_->create(key("claim/" + std::to_string(w) + "/" + std::to_string(g + 1)),
                                 store_bytes(token))) {
        const std::lock_guard<std::mutex> lock(holder_mutex_);
        slot_ = w;
        generation_ = g + 1;
        store_->set(key("heartbeat/" + std::to_string(w) + "/" + std::to_string(generation_)),
                    store_bytes("0"));
        return;
      }
      if (!free) silent[w] = g;
    }
    if (silent.empty()) continue;  // lost a race for a free slot: look again
    for (const auto& [w, g] : silent) {
      const std::string beat = key("heartbeat/" + std::to_string(w) + "/" + std::to_string(g));
      if (watch_.silent(*store_, beat))
        store_->create(key("dead/" + std::to_string(w) + "/" + std::to_string(g)),
                       store_bytes("missed heartbeats"));
    }
    if (steady_seconds() - start > settings_.timeout_s * 2 + 1) {
      if (settings_.slot >= 0)
        throw std::runtime_error("diloco.slot " + std::to_string(settings_.slot) + " of group '" +
                                 settings_.group + "' is held by a live worker");
      throw std::runtime_error("group '" + settings_.group + "' is full: its " +
                               std::to_string(settings_.slots) +
                               " slots (diloco.workers) are held by live workers");
    }
    sleep_seconds(heartbeat_period(settings_.timeout_s));
  }
}

std::string ElasticGroup::heartbeat_key() {
  const std::lock_guard<std::mutex> lock(holder_mutex_);
  return key("heartbeat/" + std::to_string(slot_) + "/" + std::to_string(generation_));
}

void ElasticGroup::leave(const std::string& why) {
  if (left_.exchange(true)) return;
  if (heartbeat_) heartbeat_->stop();
  if (slot_ < 0) return;
  try {
    store_->create(key("dead/" + std::to_string(slot_) + "/" + std::to_string(generation_)),
                   store_bytes(why));
  } catch (const StoreUnavailable&) {  // the others will find it silent instead
  }
}

std::optional<std::int64_t> ElasticGroup::newest_sync() {
  const std::string prefix = key("members/");
  std::optional<std::int64_t> newest;
  for (const std::string& k : store_->keys(prefix)) {
    const std::int64_t step = std::stoll(k.substr(prefix.size()));
    newest = std::max(newest.value_or(step), step);
  }
  return newest;
}

void ElasticGroup::wait_for_workers() {
  const double start = steady_seconds();
  while (true) {
    if (static_cast<int>(live_holders().size()) >= settings_.min_workers) return;
    if (steady_seconds() - start > settings_.timeout_s)
      throw std::runtime_error("group '" + settings_.group + "' has fewer than " +
                               std::to_string(settings_.min_workers) +
                               " workers (diloco.min_workers) after " +
                               std::to_string(static_cast<int>(settings_.timeout_s)) + " s");
    sleep_seconds(0.05);
  }
}

bool ElasticGroup::found_dead(int slot, std::int64_t generation) {
  if (is_dead(slot, generation)) return true;
  if (slot == slot_ && generation == generation_) return false;
  const std::string name = std::to_string(slot) + "/" + std::to_string(generation);
  if (!watch_.silent(*store_, key("heartbeat/" + name))) return false;
  store_->create(key("dead/" + name), store_bytes("missed heartbeats"));
  return true;
}

std::map<int, std::int64_t> ElasticGroup::live_holders() {
  std::map<int, std::int64_t> live;
  for (int w = 0; w < settings_.slots; ++w) {
    const std::int64_t g = newest_holder(w);
    if (g >= 0 && !found_dead(w, g)) live[w] = g;
  }
  return live;
}

std::optional<SyncMembers> ElasticGroup::final_decision(std::int64_t step) {
  std::optional<SyncMembers> last;
  for (int attempt = 0;; ++attempt) {
    const auto stored = store_->get(key("members/" + sync_name(step, attempt)));
    if (!stored) return last;
    last = SyncMembers::parse(store_text(*stored));
  }
}

std::optional<SyncMembers> ElasticGroup::try_decide(std::int64_t step, std::int64_t previous,
                                                    int attempt) {
  const std::string name = sync_name(step, attempt);
  const std::string arrivals = key("arrive/" + name + "/");
  // A retry is among the last attempt's members still alive: a worker that took a slot since is
  // on its way to a later sync (it read the sync as decided), and is not waited for.
  std::optional<SyncMembers> before;
  std::map<int, std::int64_t> expected;
  if (attempt > 0) {
    const auto stored = store_->get(key("members/" + sync_name(step, attempt - 1)));
    if (!stored) return std::nullopt;
    before = SyncMembers::parse(store_text(*stored));
    for (std::size_t i = 0; i < before->slots.size(); ++i)
      if (!found_dead(before->slots[i], before->holders[i]))
        expected[before->slots[i]] = before->holders[i];
  } else {
    expected = live_holders();
  }
  SyncMembers m;
  m.step = step;
  m.attempt = attempt;
  for (const auto& [w, g] : expected) {
    const auto arrived = store_->get(arrivals + std::to_string(w));
    if (!arrived) return std::nullopt;  // a live holder is still on its way
    long long holder = -1;
    char role[16] = {};
    if (std::sscanf(store_text(*arrived).c_str(), "%lld %15s", &holder, role) != 2 || holder != g)
      return std::nullopt;  // an earlier holder's arrival: the new one is on its way
    m.slots.push_back(w);
    m.holders.push_back(g);
    m.joining.push_back(std::string(role) == "joiner");
  }
  // A retry always forms a new Gloo group (the last one failed); a first attempt continues the
  // previous sync's when its members are the same.
  m.group_step = step;
  m.group_attempt = attempt;
  if (attempt == 0 && previous >= 0) {
    before = final_decision(previous);
    if (before && before->slots == m.slots && before->holders == m.holders) {
      m.group_step = before->group_step;
      m.group_attempt = before->group_attempt;
    }
  }
  if (before)
    for (int slot : before->slots)
      if (m.index_of(slot) < 0) m.lost.push_back(slot);
  store_->create(key("members/" + name), store_bytes(m.text()));
  // Whoever created it, the stored decision is the one.
  return SyncMembers::parse(store_text(*store_->get(key("members/" + name))));
}

SyncMembers ElasticGroup::sync(std::int64_t step, std::int64_t previous, bool joining,
                               int attempt) {
  SyncMembers m = decide(step, previous, joining, attempt);
  m.own_slot = slot_;
  return m;
}

SyncMembers ElasticGroup::decide(std::int64_t step, std::int64_t previous, bool joining,
                                 int attempt) {
  const std::string name = sync_name(step, attempt);
  const std::string decided = key("members/" + name);
  bool arrived = false;
  StoreOutage outage(settings_.timeout_s);
  while (true) {
    try {
      if (is_dead(slot_, generation_)) {
        // Found silent while the store was out of its reach: it holds no slot any more.
        take_slot();
        std::printf("rejoining group '%s' as slot %d (this worker was found silent)\n",
                    settings_.group.c_str(), slot_);
        joining = true;
        arrived = false;
      }
      if (!arrived)
        store_->set(
            key("arrive/" + name + "/" + std::to_string(slot_)),
            store_bytes(std::to_string(generation_) + (joining ? " joiner" : " contributor")));
      arrived = true;
      if (const auto stored = store_->get(decided)) return SyncMembers::parse(store_text(*stored));
      if (auto m = try_decide(step, previous, attempt)) return *m;
      outage.answered();
    } catch (const StoreUnavailable& e) {
      if (outage.expired(e, "at the sync after step " + std::to_string(step))) {
        std::fprintf(stderr,
                     "warning: the rendezvous store is still unreachable: the sync after step %lld "
                     "applies this worker's outer step alone; it rejoins when the store is back\n",
                     static_cast<long long>(step));
        SyncMembers m;
        m.step = step;
        m.slots = {slot_};
        m.holders = {generation_};
        m.joining = {false};
        m.attempt = attempt;
        m.group_step = -1 - step;  // a Gloo group of its own, made without the store
        m.group_attempt = attempt;
        m.alone = true;
        return m;
      }
    }
    sleep_seconds(0.02);
  }
}

ElasticGroup::Outcome ElasticGroup::settle(const SyncMembers& m, bool averaged) {
  if (m.alone) return averaged ? Outcome::commit : Outcome::retry;
  const std::string prefix = key("outcome/" + sync_name(m.step, m.attempt) + "/");
  const std::string mine = std::to_string(slot_) + "." + std::to_string(generation_);
  StoreOutage outage(settings_.timeout_s);
  bool posted = false;
  while (true) {
    try {
      if (!posted) store_->set(prefix + mine, store_bytes(averaged ? "averaged" : "failed"));
      posted = true;
      // Nobody applies an average that a member failed to complete.
      if (!averaged) return Outcome::retry;
      // One read per member (not a listing: a Redis listing scans the whole store).
      bool everyone = true;
      for (std::size_t i = 0; i < m.slots.size(); ++i) {
        const std::string id = std::to_string(m.slots[i]) + "." + std::to_string(m.holders[i]);
        if (id == mine) continue;
        const auto outcome = store_->get(prefix + id);
        if (outcome && store_text(*outcome) == "failed") return Outcome::retry;
        if (!outcome && everyone && !found_dead(m.slots[i], m.holders[i]))
          everyone = false;  // alive and still averaging
      }
      if (everyone) return Outcome::commit;
      outage.answered();
    } catch (const StoreUnavailable& e) {
      // A failed average is discarded whatever the others learn: they find it silent.
      if (!averaged) return Outcome::retry;
      if (outage.expired(e, "after the averaging of the sync after step " + std::to_string(m.step)))
        return Outcome::commit_and_rejoin;
    }
    sleep_seconds(0.02);
  }
}

}  // namespace strata

// Membership of an elastic DiLoCo group (docs/ARCHITECTURE.md §2 "Elastic DiLoCo"): independent
// worker jobs that meet in a rendezvous store (rendezvous_store.h), each holding one of the
// group's slots. One ElasticGroup runs on each worker's leader (its rank 0); the worker's other
// ranks learn its decisions from it. No worker is special: every decision is a key that the first
// worker to reach it creates (RendezvousStore::create), and every other reads.
//
// Keys, under "<group>/":
//   settings             the group's settings, written by its first worker; a worker whose
//                        settings differ is refused, naming the first key that differs
//   claim/<w>/<g>        slot w's g-th holder (its token); g grows each time the slot is retaken
//   heartbeat/<w>/<g>    a counter the holder advances every heartbeat period
//   dead/<w>/<g>         its deathrattle: why it left (the end of its steps, a signal, an error),
//                        or "missed heartbeats" when another worker found it silent for the
//                        timeout (a holder is judged by whether its counter moves, on the
//                        observer's own clock: hosts need no common time)
//   arrive/<s>/<w>       slot w reached the sync after inner step s ("<g> contributor|joiner")
//   members/<s>          the sync's decided membership (SyncMembers, as text)
//   outcome/<s>/<w>.<g>  how the averaging went on member w's job (every rank of it): "averaged"
//                        or "failed"
// A sync that had to be retried names its attempts a ≥ 1 "<s>.<a>" in the last three keys.
//
// A sync is decided when every live slot holder has arrived: the members are those that arrived,
// in slot order; holders found dead are left out (and their deathrattle written). A holder that
// arrives after the decision, or finds itself left out, is not a member of it: it rejoins at the
// next sync as a joiner. A joiner is a member that contributes nothing to the sync's average and
// takes the group's state from a contributor afterwards (train/diloco/elastic_worker.h).
//
// A member can die during the averaging itself, leaving the others with a collective that failed
// on some ranks and perhaps completed on others. So the averaging is a transaction: each member
// posts its outcome and applies the average only when every member either averaged or is dead
// (the survivors then hold the same complete average, bit for bit). One failed outcome makes
// every member discard its average and meet again at attempt a + 1 of the same sync, decided
// like the first among the holders still alive: the sync is retried without the lost member.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/elastic/membership.h"
#include "parallel/elastic/record_signing.h"
#include "parallel/elastic/rendezvous_store.h"

namespace strata {

struct ElasticGroupSettings {
  std::string store_url;  // diloco.join
  std::string group;      // diloco.group
  int slots = 1;          // diloco.workers: the most workers the group holds
  int slot = -1;          // diloco.slot: -1 takes the first free slot in order
  int min_workers = 1;    // diloco.min_workers: a fresh group starts when this many hold slots
  double timeout_s = 60;  // diloco.timeout: silence that drops a worker
  // The settings every worker must share, as text (the trainer's: a config's YAML), and what
  // makes a worker's differ from the group's: the message of the refusal, naming the key ("" when
  // they agree after all, as two spellings of one config may).
  std::string shared_settings;
  std::function<std::string(const std::string& group_settings)> difference;
  // diloco.secret_file's secret: every record signed and checked (signed_store.h); null: none.
  std::shared_ptr<const SharedSecret> secret;
};

// One sync's members, in slot order.
struct SyncMembers {
  std::int64_t step = 0;              // the inner step the sync follows
  std::vector<int> slots;             // member slots, ascending
  std::vector<std::int64_t> holders;  // each member's claim generation g
  std::vector<bool> joining;          // takes the state, contributes nothing
  // The sync whose membership this one continues unchanged (its Gloo group is reused): this
  // sync's own step when the members differ from the previous sync's.
  std::int64_t group_step = 0;
  int attempt = 0;        // this decision's attempt (0 unless the sync was retried)
  int group_attempt = 0;  // the attempt of the decision group_step names
  // Slots that were members of the previous sync and are not now.
  std::vector<int> lost;
  // This worker could not reach the store for the timeout: a group of one, decided alone (never
  // stored). It joins the group again at its next sync.
  bool alone = false;
  // The slot of the worker it was returned to (its slot may change when it takes one again);
  // -1 in the stored decision.
  int own_slot = -1;

  int index_of(int slot) const;  // -1 when not a member
  std::string text() const;
  // The text's membership; malformed members (not "slot:holder:joining", negative, or slots out of
  // ascending order), a negative attempt or an own_slot below −1 are a strata::Error naming them.
  static SyncMembers parse(const std::string& text);
  bool operator==(const SyncMembers&) const = default;
};

class ElasticGroup {
 public:
  // Opens the store, checks or writes the group's settings, takes a slot and starts the
  // heartbeat. Errors (an unreachable store, settings that differ, a full group, a slot held by a
  // live worker) throw std::runtime_error with the message of the `error:` line.
  explicit ElasticGroup(const ElasticGroupSettings& settings);
  // Leaves a deathrattle ("exit") unless leave() said why already.
  ~ElasticGroup();
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  int slot() const { return slot_; }
  std::int64_t holder() const { return generation_; }
  RendezvousStore& store() { return *store_; }
  const ElasticGroupSettings& settings() const { return settings_; }

  // The step of the newest decided sync, or nullopt for a fresh group (none yet).
  std::optional<std::int64_t> newest_sync();
  // A fresh group: waits until min_workers slots have live holders (at most the timeout, then
  // throws).
  void wait_for_workers();

  // The sync after inner step `step` (`previous`: the step of the sync before it in the schedule,
  // or -1): arrives, waits for the decision (deciding it when it can) and returns it. This worker
  // may not be among its members (it arrived late or was left out): then it joins the next one.
  // A store that does not answer is retried, saying so, for the timeout; then the sync is this
  // worker alone (SyncMembers::alone). A worker that others found silent meanwhile (its claim
  // marked dead) takes a slot again and arrives as a joiner.
  SyncMembers sync(std::int64_t step, std::int64_t previous, bool joining, int attempt = 0);

  // After the averaging of the sync `m` (this worker's outcome: `averaged` on every rank of its
  // job): posts it and waits for every other member's, or for its death. Commit when every member
  // averaged or died; retry (attempt + 1) when one failed. A store that does not answer for the
  // timeout after this worker averaged: it applies its average and rejoins the group at its next
  // sync (whatever the others decided, it then takes their state).
  enum class Outcome { commit, retry, commit_and_rejoin };
  Outcome settle(const SyncMembers& m, bool averaged);

  // The deathrattle: why this worker leaves; the heartbeat stops.
  void leave(const std::string& why);

 private:
  std::string key(const std::string& name) const { return settings_.group + "/" + name; }
  void take_slot();
  // The key of this holder's heartbeat (read by the heartbeat thread: the holder may change).
  std::string heartbeat_key();
  std::int64_t newest_holder(int slot);
  bool is_dead(int slot, std::int64_t generation);
  // The holders that are alive now, by slot (a silent one is declared dead here).
  std::map<int, std::int64_t> live_holders();
  SyncMembers decide(std::int64_t step, std::int64_t previous, bool joining, int attempt);
  std::optional<SyncMembers> try_decide(std::int64_t step, std::int64_t previous, int attempt);
  // The decision the sync after `step` ended with (its last attempt's), if any.
  std::optional<SyncMembers> final_decision(std::int64_t step);
  // True once member `slot`'s holder `generation` has a deathrattle or has been silent for the
  // timeout (written as its deathrattle then).
  bool found_dead(int slot, std::int64_t generation);

  ElasticGroupSettings settings_;
  std::unique_ptr<RendezvousStore> store_;
  int slot_ = -1;
  std::int64_t generation_ = -1;
  SilenceWatch watch_;                       // the other holders' heartbeats
  std::map<int, std::int64_t> newest_seen_;  // per slot: the newest claim generation seen
  std::mutex holder_mutex_;  // slot_ and generation_, which the heartbeat thread reads
  std::atomic<bool> left_{false};
  std::unique_ptr<HeartbeatThread> heartbeat_;
};

}  // namespace strata

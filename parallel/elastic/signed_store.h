// A rendezvous store whose records carry the group's signature (docs/ARCHITECTURE.md §2
// "Authenticated membership"): a decorator over either store (rendezvous_store.h) for a group
// with a secret (record_signing.h). Every value this worker writes is a signed record; a value it
// reads whose signature is not the secret's for that key (forged, written by a worker with another
// secret or none, or copied from another key) is treated as absent and reported: one warning line
// per key, and counted (forged()).
//
//   set, get           sign and check the record (the MAC binds the key's name)
//   create             atomic as the inner store's create; a forged record planted at the key first
//                      would block it forever, so the key has alternate names "<key>@1" … "@7":
//                      create tries each in turn until one is created (true) or holds a valid
//                      record (false, another member created it), skipping forged ones; get returns
//                      the first valid record along the same names, stopping at an absent one. All
//                      members walk the names alike, so create stays "exactly one wins". Seven
//                      forged names in a row: StoreUnavailable (the store is being denied to us).
//                      A name holding a record in the signed form under another secret is not
//                      skipped: create throws std::runtime_error, since the group there has
//                      another secret (a worker whose secret differs is refused at the group's
//                      settings, the first key it creates, before it writes anything).
//   keys               the keys (alternate names folded into theirs) whose records check: one get
//                      per listed key
//   remove             removes the key and its alternates (deleting is not forging)
//   add                a counter cannot be signed where the store adds (INCRBY, a locked file), so
//                      a signed counter is a chain of signed versions "<key>.v<n>", n = 1, 2, …,
//                      each holding the running total: add reads the newest valid version and
//                      creates the next (compare-and-swap by create, so concurrent adds each land
//                      once); a forged version occupies its index and is skipped. The newest is
//                      found from the last one this store saw by galloping upwards (probes at +1,
//                      +2, +4, …) and bisecting, so a fresh reader of a long chain pays O(log n)
//                      reads and a steady one about two per add.
// Thread-safe as the inner store is (the counters' cache under a mutex of its own).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "parallel/elastic/record_signing.h"
#include "parallel/elastic/rendezvous_store.h"

namespace strata {

class SignedStore final : public RendezvousStore {
 public:
  SignedStore(std::unique_ptr<RendezvousStore> inner, std::shared_ptr<const SharedSecret> secret);

  std::string url() const override { return inner_->url(); }
  void set(const std::string& key, const std::vector<char>& value) override;
  std::optional<std::vector<char>> get(const std::string& key) override;
  bool create(const std::string& key, const std::vector<char>& value) override;
  // create at the key itself, without alternate names: any record there (forged or not) makes it
  // false. For a group's settings (membership.h check_shared_settings).
  bool create_here(const std::string& key, const std::vector<char>& value);
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  void remove(const std::string& key) override;
  std::vector<std::string> keys(const std::string& prefix) override;

  // Records ignored so far for want of a valid signature.
  std::int64_t forged() const { return forged_; }

  static constexpr int kAlternates = 8;  // the key and 7 alternate names

 private:
  // The newest version of counter `key`: the highest index that exists (valid or not) and the
  // total of the highest valid one (0 when none).
  struct Version {
    std::int64_t index = 0, total = 0;
  };
  Version newest_version(const std::string& key, std::int64_t from);
  std::string version_key(const std::string& key, std::int64_t index) const;
  void report(const std::string& key);

  std::unique_ptr<RendezvousStore> inner_;
  std::shared_ptr<const SharedSecret> secret_;
  std::atomic<std::int64_t> forged_{0};
  std::mutex mutex_;                              // reported_ and versions_
  std::set<std::string> reported_;                // keys warned about
  std::map<std::string, std::int64_t> versions_;  // per counter: the newest index seen
};

// The store for a group: signed when `secret` is given, else the plain one.
std::unique_ptr<RendezvousStore> open_group_store(const std::string& url,
                                                  std::shared_ptr<const SharedSecret> secret,
                                                  double connect_timeout_s = 5.0);

}  // namespace strata

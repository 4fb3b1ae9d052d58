// The rendezvous store of elastic DiLoCo (docs/ARCHITECTURE.md §2 "Elastic DiLoCo"): the one
// service that independent worker jobs share. It holds the group's settings, who holds which slot,
// heartbeats, deathrattles, each sync's decided membership, and the addresses Gloo's rendezvous
// exchanges; nothing else passes through it (the outer gradients go over Gloo).
//
// Two implementations behind one interface, chosen by URL (open_rendezvous_store):
//   file:///path      a directory on a shared file system (one machine, or NFS): one file per key,
//                     written to a temporary name and renamed, so a reader never sees half a value;
//                     create() links the temporary file to the key's name, which fails if it exists
//                     (atomic on local file systems and NFSv3+); add() holds an flock on the key's
//                     lock file while it reads and rewrites the counter.
//   redis://host:port a Redis server (Debian's redis-server), for many hosts: SET, GET, SET NX,
//                     INCRBY, DEL, SCAN; redis://:password@host:port (or user:password@) sends
//                     AUTH first (a server started with --requirepass).
// Keys are printable ASCII without spaces ("group/slot/3"); '/' separates a file store's
// directories. Values are bytes.
//
// Every operation either succeeds or throws StoreUnavailable (the store cannot be reached or
// answered with an error); callers that must survive a store outage (the heartbeat, a sync's
// rendezvous) catch it, say so, and retry.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata {

class StoreUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  // The URL it was opened with, without a password (messages).
  virtual std::string url() const = 0;
  // key := value (replacing any value).
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  // The value, or nullopt when the key does not exist.
  virtual std::optional<std::vector<char>> get(const std::string& key) = 0;
  // key := value only if the key does not exist; true when this call created it. Exactly one of
  // several concurrent callers (on any hosts) gets true.
  virtual bool create(const std::string& key, const std::vector<char>& value) = 0;
  // Atomically adds `delta` to the integer counter at `key` (absent: 0) and returns the new value.
  // Read a counter with add(key, 0), never get(): a signed store keeps a counter elsewhere
  // (signed_store.h).
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // Removes the key (absent: nothing happens).
  virtual void remove(const std::string& key) = 0;
  // The keys that start with `prefix`, sorted.
  virtual std::vector<std::string> keys(const std::string& prefix) = 0;
};

// "file:///abs/path" or "redis://host:port". A malformed URL, a directory that cannot be created
// or a server that does not answer within `connect_timeout_s` throws StoreUnavailable naming it.
std::unique_ptr<RendezvousStore> open_rendezvous_store(const std::string& url,
                                                       double connect_timeout_s = 5.0);

// The URL as messages and logs may show it: a Redis password replaced by "***".
std::string redacted_store_url(const std::string& url);

// Conversions for the string values most keys hold.
std::vector<char> store_bytes(const std::string& text);
std::string store_text(const std::vector<char>& bytes);

}  // namespace strata

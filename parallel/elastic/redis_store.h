// The rendezvous store on a Redis server (rendezvous_store.h,
// "redis://[[user]:password@]host:port"), for worker jobs on many hosts. One connection (hiredis),
// behind a mutex so that threads may share the store (the heartbeat thread beside the training
// loop). Each operation is one Redis command, sent as an argument vector (binary-safe keys and
// values):
//   set SET, get GET, create SET NX, add INCRBY, remove DEL, keys SCAN MATCH <prefix>* (sorted).
//
// Failures: a reply that is an error (INCRBY on a value that is not an integer), a server that
// cannot be reached, or one that does not answer within the timeout throws StoreUnavailable naming
// the URL. A lost connection (the server restarted) is reconnected once before that: the
// idempotent commands (SET, GET, DEL, SCAN) are simply sent again; SET NX and INCRBY are not, since
// the lost one may have been applied, so they first check the connection with a PING (and
// reconnect if it is gone), and a connection lost between the PING and their reply throws, saying
// that the outcome is unknown. The next call reconnects. A write to a closed connection does not
// raise SIGPIPE (it is blocked and discarded around each command, in the calling thread only).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/elastic/rendezvous_store.h"

struct redisContext;
struct redisReply;

namespace strata {

class RedisStore final : public RendezvousStore {
 public:
  // Connects to host:port, waiting at most `timeout_s` seconds; the same limit applies to each
  // command's reply. Throws StoreUnavailable when the server does not answer. With a password
  // (redis://[user]:password@host:port), every connection starts with AUTH (Redis 6's
  // AUTH user password with a user); a refusal throws StoreUnavailable saying so. The password
  // is never part of url() or a message.
  RedisStore(const std::string& host, int port, double timeout_s, std::string user = "",
             std::string password = "");
  ~RedisStore() override;

  std::string url() const override;
  void set(const std::string& key, const std::vector<char>& value) override;
  std::optional<std::vector<char>> get(const std::string& key) override;
  bool create(const std::string& key, const std::vector<char>& value) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  void remove(const std::string& key) override;
  std::vector<std::string> keys(const std::string& prefix) override;

 private:
  struct ContextDeleter {
    void operator()(redisContext* context) const;
  };
  struct ReplyDeleter {
    void operator()(redisReply* reply) const;
  };
  using Reply = std::unique_ptr<redisReply, ReplyDeleter>;
  enum class Retry { resend, ping_first };

  // The reply to the command `arguments` (never an error reply); the caller holds mutex_.
  Reply command(const std::vector<std::string_view>& arguments, Retry retry);
  // One attempt on the current connection: nullptr if the connection is lost.
  Reply send(const std::vector<std::string_view>& arguments);
  void connect();
  [[noreturn]] void fail(const std::string& what) const;

  std::string host_;
  int port_;
  double timeout_s_;
  std::string user_, password_;
  std::mutex mutex_;
  std::unique_ptr<redisContext, ContextDeleter> context_;
};

}  // namespace strata

// Requests between SWARM peers (docs/ARCHITECTURE.md §2 "SWARM"): a micro-batch's activations
// going to a peer of the next stage and its output (or its input's gradient) coming back, with a
// deadline per request, between peers that come and go.
//
// ZeroMQ carries them (Debian's libzmq3-dev, cppzmq-dev). A server binds one ROUTER socket on the
// endpoint it publishes in the rendezvous store; a client keeps one DEALER socket per server it
// talks to. ZeroMQ connects, reconnects and queues on its own, so a peer that joins is reached by
// connecting to its endpoint, and one that dies costs its callers a deadline, not a broken
// connection to rebuild. Why not Gloo's pairs: a Gloo context is a fixed mesh made for one
// membership (elastic DiLoCo makes one per sync), and a receive that times out leaves its pair
// unusable; here every micro-batch may go to another peer. Gloo stays where a group is fixed for
// a while: the averaging among a stage's peers. Why not gRPC: protobuf code generation and its
// threads for what is one request and one reply of bytes.
//
// On the wire a request is the frames [empty | id | method | header | payload] (the ROUTER adds
// the caller's identity before them) and its reply [empty | id | status | header | payload];
// `id` is the client's counter, 8 bytes, so a late reply to a request that timed out is
// recognised and dropped.
//
// With the swarm's secret (swarm.secret_file) every request and reply carries a sixth frame, its
// MAC (parallel/elastic/record_signing.h: bound to the id, the direction and every byte). A
// server never hands its handler a request whose MAC is missing or wrong: it answers "error"
// with "refused: ..." (unsigned) and says so on stderr (the first time, then every 100th); a
// client takes a reply only with its MAC, and reports an unsigned "refused" error as the RpcError
// it is. ZeroMQ offers no hook to run a challenge before a connection's first message without a
// ZAP handler and CURVE keys (libsodium), so every message proves itself instead, which also
// covers a connection taken over midway. A request replayed by someone who recorded it is served
// again: the stage counts each micro-batch's backward once (train/swarm/stage_rounds.h) whatever
// arrives twice.
//
// Every socket lives in the process's one ZeroMQ context, which is never terminated: terminating
// it waits for every socket to be closed, so one left open at exit would hang the process.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/elastic/record_signing.h"

namespace strata {

// A request or a reply. `method` names what a request asks ("forward", "backward", ...); a reply's
// is its status: "ok", or "error" with the server's message in `header` (a handler may answer
// another status; the caller gets it as it is). `header` is short text (the request's arguments,
// "batch=2 round=7"); `payload` the bytes (activations, gradients, state).
struct RpcMessage {
  std::string method;
  std::string header;
  std::vector<char> payload;
};

// A server answered "error": its message.
class RpcError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bytes moved per method: payload bytes only (the headers are a few dozen bytes), so that the
// counts can equal the analytic count of activations and gradients.
struct RpcTraffic {
  std::int64_t calls = 0;
  std::int64_t request_bytes = 0;
  std::int64_t reply_bytes = 0;
  std::int64_t timeouts = 0;  // calls that got no reply in time (client side)
  bool operator==(const RpcTraffic&) const = default;
};
using RpcTrafficByMethod = std::map<std::string, RpcTraffic>;

// A server: one ROUTER socket. Requests are handled one at a time on the thread that calls
// serve_one (the peer's loop), so a handler needs no locks and the peer decides when it serves.
class RpcServer {
 public:
  using Handler = std::function<RpcMessage(const RpcMessage& request)>;

  // Binds `address`: "tcp://HOST:PORT" where HOST is an address, an interface name or "*" (all
  // interfaces) and PORT may be "*" (a free port), or "ipc:///path". A taken port or an unknown
  // interface throws std::runtime_error naming the address. `advertised_host` replaces a "*" host
  // (or 0.0.0.0) in endpoint(): the name or address other hosts reach this one by.
  // `secret`: the swarm's, or null (unauthenticated).
  explicit RpcServer(const std::string& address, const std::string& advertised_host = "127.0.0.1",
                     std::shared_ptr<const SharedSecret> secret = nullptr);
  ~RpcServer();
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // Where clients connect: the bound address with its port resolved ("tcp://127.0.0.1:40123").
  const std::string& endpoint() const { return endpoint_; }

  // Waits up to `timeout_s` for a request, hands it to `handler` and sends the reply; false when
  // none came. The reply's method is its status ("ok" when the handler leaves it empty). A handler
  // that throws std::exception answers "error" with its message (the server goes on).
  // A request that arrived before its caller gave up is still served, even after the caller has
  // closed its socket (ZeroMQ keeps what has arrived); the reply is then dropped. So a request
  // its caller retried elsewhere may be handled twice: a handler that accumulates (a backward's
  // weight gradients) must allow for it.
  bool serve_one(double timeout_s, const Handler& handler);
  // Counted per request method (requests received, replies sent).
  const RpcTrafficByMethod& traffic() const { return traffic_; }
  // Requests refused for a missing or wrong MAC.
  std::int64_t refused() const { return refused_; }
  // The swarm's secret it checks requests with (null: none); its callers sign with the same.
  const std::shared_ptr<const SharedSecret>& secret() const { return secret_; }

 private:
  struct Sockets;
  std::unique_ptr<Sockets> sockets_;
  std::string endpoint_;
  std::shared_ptr<const SharedSecret> secret_;
  RpcTrafficByMethod traffic_;
  std::int64_t refused_ = 0;
};

// A client: one DEALER socket per server endpoint, made on first use. Not thread-safe: one per
// thread that calls.
class RpcClient {
 public:
  explicit RpcClient(std::shared_ptr<const SharedSecret> secret = nullptr);
  ~RpcClient();
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  // Sends `request` to the server at `endpoint` and waits up to `timeout_s` for its reply.
  // nullopt when none came in time (a server that is dead, unreachable or busy past the
  // deadline): the socket to it is then closed, so the late reply is never read, and the next call
  // connects afresh. A reply "error" throws RpcError with the server's message, the endpoint and
  // the method. An endpoint ZeroMQ cannot parse throws std::runtime_error naming it.
  std::optional<RpcMessage> call(const std::string& endpoint, const RpcMessage& request,
                                 double timeout_s);
  // Forgets the socket to `endpoint` (a peer that left).
  void disconnect(const std::string& endpoint);
  // Counted per request method (requests sent, replies received, timeouts).
  const RpcTrafficByMethod& traffic() const { return traffic_; }

 private:
  struct Sockets;
  std::unique_ptr<Sockets> sockets_;
  std::shared_ptr<const SharedSecret> secret_;
  std::uint64_t next_id_ = 1;
  RpcTrafficByMethod traffic_;
};

}  // namespace strata

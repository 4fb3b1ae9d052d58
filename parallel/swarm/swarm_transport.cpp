#include "parallel/swarm/swarm_transport.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <span>
#include <string_view>

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

// The process's one ZeroMQ context (its I/O thread moves every socket's bytes), made on first use
// and never destroyed. Destroying it runs zmq_ctx_term, which waits for every socket of the
// context to be closed: one still open when the process exits (held by a thread that was never
// joined, or by an object an error path leaked) would turn the exit into a hang. The I/O thread
// ends with the process.
zmq::context_t& shared_context() {
  static zmq::context_t* const context = new zmq::context_t(1);
  return *context;
}

// A socket that is closed at once, its unsent messages dropped: a request to a dead peer must not
// keep the process (or the context) waiting, nor a reply to a caller that has given up.
zmq::socket_t make_socket(zmq::socket_type type) {
  zmq::socket_t socket(shared_context(), type);
  socket.set(zmq::sockopt::linger, 0);
  return socket;
}

Clock::time_point deadline_after(double timeout_s) {
  // A negative or NaN timeout polls once; a huge one is capped so the clock's arithmetic cannot
  // overflow (1e9 s: 31 years).
  const double seconds = timeout_s > 0 ? std::min(timeout_s, 1e9) : 0.0;
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Waits until `socket` has `events` (ZMQ_POLLIN, ZMQ_POLLOUT) or `deadline` passes; true when it
// has them. zmq_poll takes whole milliseconds: the wait is rounded up, so it never ends early.
bool wait_for(zmq::socket_t& socket, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    zmq::pollitem_t item{socket.handle(), 0, events, 0};
    try {
      if (zmq::poll(&item, 1, std::max(left, std::chrono::milliseconds(0))) > 0) return true;
    } catch (const zmq::error_t& error) {
      if (error.num() != EINTR) throw;  // a signal: wait again for what is left
      continue;
    }
    if (Clock::now() >= deadline) return false;
  }
}

// The whole of the multipart message waiting on `socket` (ZeroMQ delivers a message's frames
// together, so once poll says there is one, none of them blocks); empty when there is none.
std::vector<zmq::message_t> receive_frames(zmq::socket_t& socket) {
  std::vector<zmq::message_t> frames;
  if (!zmq::recv_multipart(socket, std::back_inserter(frames), zmq::recv_flags::dontwait))
    frames.clear();
  return frames;
}

std::vector<char> bytes_of(const zmq::message_t& frame) {
  const char* data = frame.data<char>();
  return std::vector<char>(data, data + frame.size());
}

// The request id's frame. Only the client that wrote it reads it (the server echoes the frame
// unread), so the host's byte order is the wire's.
std::array<char, sizeof(std::uint64_t)> id_bytes(std::uint64_t id) {
  std::array<char, sizeof(std::uint64_t)> bytes;
  std::memcpy(bytes.data(), &id, sizeof id);
  return bytes;
}

// ZMQ_LAST_ENDPOINT names a "*" host as 0.0.0.0, which other hosts cannot connect to.
std::string advertised_endpoint(const std::string& bound, const std::string& advertised_host) {
  const std::string wildcard = "tcp://0.0.0.0:";
  if (bound.rfind(wildcard, 0) != 0) return bound;
  return "tcp://" + advertised_host + ":" + bound.substr(wildcard.size());
}

// What a request and a reply are on the wire, after the ROUTER's identity frame (the server's
// side) or as the DEALER sees them (the client's): [empty | id | method or status | header |
// payload]. The empty frame keeps the REQ/REP envelope's shape, so a REQ socket could talk too.
constexpr std::size_t kMessageFrames = 5;
constexpr std::size_t kIdBytes = sizeof(std::uint64_t);

// `signed_frames`: the sixth frame, the MAC, may follow (and must, to pass check_mac).
bool well_formed(const std::vector<zmq::message_t>& frames, std::size_t first, bool signed_frames) {
  const std::size_t count = frames.size() - std::min(frames.size(), first);
  return (count == kMessageFrames || (signed_frames && count == kMessageFrames + 1)) &&
         frames[first].size() == 0 && frames[first + 1].size() == kIdBytes;
}

std::string_view view(const zmq::message_t& frame) { return {frame.data<char>(), frame.size()}; }

// Whether the message at `first` carries the MAC `secret` makes for it.
bool check_mac(const SharedSecret& secret, bool reply, const std::vector<zmq::message_t>& frames,
               std::size_t first) {
  return frames.size() == first + kMessageFrames + 1 &&
         check_rpc_mac(secret, reply, view(frames[first + 1]), view(frames[first + 2]),
                       view(frames[first + 3]), view(frames[first + 4]), view(frames[first + 5]));
}

}  // namespace

struct RpcServer::Sockets {
  zmq::socket_t router = make_socket(zmq::socket_type::router);
};

RpcServer::RpcServer(const std::string& address, const std::string& advertised_host,
                     std::shared_ptr<const SharedSecret> secret)
    : sockets_(std::make_unique<Sockets>()), secret_(std::move(secret)) {
  try {
    sockets_->router.bind(address);
  } catch (const zmq::error_t& error) {
    throw std::runtime_error("cannot bind the SWARM server to " + address + ": " + error.what());
  }
  endpoint_ =
      advertised_endpoint(sockets_->router.get(zmq::sockopt::last_endpoint), advertised_host);
}

RpcServer::~RpcServer() = default;

bool RpcServer::serve_one(double timeout_s, const Handler& handler) {
  const Clock::time_point deadline = deadline_after(timeout_s);
  zmq::socket_t& router = sockets_->router;
  std::vector<zmq::message_t> frames;
  // [identity | empty | id | method | header | payload]; anything else is not from an RpcClient
  // and is dropped unanswered.
  do {
    if (!wait_for(router, ZMQ_POLLIN, deadline)) return false;
    frames = receive_frames(router);
  } while (!well_formed(frames, 1, secret_ != nullptr));

  if (secret_ && !check_mac(*secret_, false, frames, 1)) {
    if (refused_++ % 100 == 0)
      std::fprintf(
          stderr,
          "warning: refused a SWARM request (%s) not signed with this swarm's secret (%lld "
          "so far): a peer without the secret, or with another\n",
          frames[3].to_string().c_str(), static_cast<long long>(refused_));
    const std::string why = "refused: the request is not signed with this swarm's secret";
    const std::array<zmq::const_buffer, 6> refusal{zmq::buffer(frames[0].data(), frames[0].size()),
                                                   zmq::const_buffer(),
                                                   zmq::buffer(frames[2].data(), frames[2].size()),
                                                   zmq::buffer(std::string_view("error")),
                                                   zmq::buffer(why),
                                                   zmq::const_buffer()};
    zmq::send_multipart(router, refusal, zmq::send_flags::dontwait);
    return true;
  }
  const RpcMessage request{frames[3].to_string(), frames[4].to_string(), bytes_of(frames[5])};
  RpcTraffic& traffic = traffic_[request.method];
  ++traffic.calls;
  traffic.request_bytes += static_cast<std::int64_t>(request.payload.size());

  RpcMessage reply;
  try {
    reply = handler(request);
    if (reply.method.empty()) reply.method = "ok";
  } catch (const std::exception& error) {
    reply = RpcMessage{"error", error.what(), {}};
  }
  RpcMac mac{};
  if (secret_)
    mac = rpc_mac(*secret_, true, view(frames[2]), reply.method, reply.header,
                  {reply.payload.data(), reply.payload.size()});

  // A ROUTER never blocks on a send: a reply to a caller that has gone (it timed out and closed
  // its socket) or whose queue is full is dropped, which is what a late reply should become.
  const std::array<zmq::const_buffer, 7> reply_frames{
      zmq::buffer(frames[0].data(), frames[0].size()),
      zmq::const_buffer(),
      zmq::buffer(frames[2].data(), frames[2].size()),
      zmq::buffer(reply.method),
      zmq::buffer(reply.header),
      zmq::buffer(reply.payload),
      zmq::buffer(mac)};
  zmq::send_multipart(router, std::span(reply_frames).first(secret_ ? 7 : 6),
                      zmq::send_flags::dontwait);
  traffic.reply_bytes += static_cast<std::int64_t>(reply.payload.size());
  return true;
}

struct RpcClient::Sockets {
  std::map<std::string, zmq::socket_t> dealers;  // by server endpoint

  zmq::socket_t& dealer_to(const std::string& endpoint) {
    auto found = dealers.find(endpoint);
    if (found != dealers.end()) return found->second;
    zmq::socket_t dealer = make_socket(zmq::socket_type::dealer);
    try {
      // Returns at once: ZeroMQ connects (and reconnects) in the background, and queues what is
      // sent meanwhile.
      dealer.connect(endpoint);
    } catch (const zmq::error_t& error) {
      throw std::runtime_error("cannot connect to the SWARM peer at " + endpoint + ": " +
                               error.what());
    }
    return dealers.emplace(endpoint, std::move(dealer)).first->second;
  }
};

RpcClient::RpcClient(std::shared_ptr<const SharedSecret> secret)
    : sockets_(std::make_unique<Sockets>()), secret_(std::move(secret)) {}

RpcClient::~RpcClient() = default;

std::optional<RpcMessage> RpcClient::call(const std::string& endpoint, const RpcMessage& request,
                                          double timeout_s) {
  const Clock::time_point deadline = deadline_after(timeout_s);
  zmq::socket_t& dealer = sockets_->dealer_to(endpoint);
  const auto id = id_bytes(next_id_++);
  RpcTraffic& traffic = traffic_[request.method];
  ++traffic.calls;

  // A DEALER's queue has room unless a thousand messages wait in it (ZMQ_SNDHWM); the wait only
  // matters then.
  std::vector<zmq::message_t> frames;
  RpcMac mac{};
  if (secret_)
    mac = rpc_mac(*secret_, false, {id.data(), id.size()}, request.method, request.header,
                  {request.payload.data(), request.payload.size()});
  const std::array<zmq::const_buffer, kMessageFrames + 1> request_frames{
      zmq::const_buffer(),          zmq::buffer(id),
      zmq::buffer(request.method),  zmq::buffer(request.header),
      zmq::buffer(request.payload), zmq::buffer(mac)};
  if (wait_for(dealer, ZMQ_POLLOUT, deadline) &&
      zmq::send_multipart(dealer,
                          std::span(request_frames).first(kMessageFrames + (secret_ ? 1 : 0)),
                          zmq::send_flags::dontwait)) {
    traffic.request_bytes += static_cast<std::int64_t>(request.payload.size());
    // Replies to this socket's earlier requests cannot arrive (a timeout closes the socket), but
    // the id is checked all the same: a reply is this request's or it is dropped.
    while (wait_for(dealer, ZMQ_POLLIN, deadline)) {
      frames = receive_frames(dealer);
      if (well_formed(frames, 0, secret_ != nullptr) &&
          std::memcmp(frames[1].data(), id.data(), kIdBytes) == 0)
        break;
      frames.clear();
    }
  }
  if (frames.empty()) {
    ++traffic.timeouts;
    // Closing (linger 0) drops the request if it is still queued and any late reply; the next call
    // to this endpoint connects a new socket, whose identity the server has never answered.
    sockets_->dealers.erase(endpoint);
    return std::nullopt;
  }

  RpcMessage reply{frames[2].to_string(), frames[3].to_string(), bytes_of(frames[4])};
  // With a secret, a reply without its MAC is taken only as what it says it is: a refusal.
  if (secret_ && !check_mac(*secret_, true, frames, 0) &&
      !(reply.method == "error" && reply.header.starts_with("refused: ")))
    throw RpcError("the SWARM peer at " + endpoint + " answered " + request.method +
                   " without this swarm's signature: refused");
  traffic.reply_bytes += static_cast<std::int64_t>(reply.payload.size());
  if (reply.method == "error")
    throw RpcError("the SWARM peer at " + endpoint + " failed " + request.method + ": " +
                   reply.header);
  return reply;
}

void RpcClient::disconnect(const std::string& endpoint) { sockets_->dealers.erase(endpoint); }

}  // namespace strata

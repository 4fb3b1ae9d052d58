// The requests between SWARM peers (parallel/swarm/swarm_transport.h) on loopback TCP: a server
// serves from its own thread as a peer's loop would, and a client calls it. Round trips keep every
// byte (an empty payload, several megabytes), a handler's exception reaches the caller as an
// RpcError, a server that does not answer costs a deadline and a counted timeout, a late reply
// never reaches a later call, the traffic counts are the payloads' sizes on both sides, and one
// client alternates between two servers. Binding a taken port throws naming the address.
#include <gtest/gtest.h>

#include <atomic>

#include <algorithm>
#include <chrono>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

#include "parallel/swarm/swarm_transport.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// "tcp://HOST:PORT" with a port number.
bool is_endpoint_on(const std::string& endpoint, const std::string& host) {
  const std::string prefix = "tcp://" + host + ":";
  if (endpoint.rfind(prefix, 0) != 0 || endpoint.size() == prefix.size()) return false;
  return std::all_of(endpoint.begin() + static_cast<std::ptrdiff_t>(prefix.size()), endpoint.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<char> bytes(const std::string& text) { return {text.begin(), text.end()}; }

std::vector<char> random_bytes(std::size_t size, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<char> result(size);
  for (char& c : result) c = static_cast<char>(byte(generator));
  return result;
}

// Answers "ok" with the request's header and payload.
RpcMessage echo(const RpcMessage& request) {
  return RpcMessage{"ok", request.header, request.payload};
}

// Serves `server` with `handler` on its own thread until destroyed. The server's traffic may be
// read once this is gone (the server is not thread-safe).
class ServingThread {
 public:
  ServingThread(RpcServer& server, RpcServer::Handler handler)
      : thread_([&server, handler = std::move(handler)](std::stop_token stop) {
          while (!stop.stop_requested()) server.serve_one(0.01, handler);
        }) {}

 private:
  std::jthread thread_;
};

TEST(SwarmTransport, EndpointResolvesThePortAndTheAdvertisedHost) {
  RpcServer loopback("tcp://127.0.0.1:*");
  EXPECT_TRUE(is_endpoint_on(loopback.endpoint(), "127.0.0.1")) << loopback.endpoint();
  RpcServer everywhere("tcp://*:*", "node7.example");
  EXPECT_TRUE(is_endpoint_on(everywhere.endpoint(), "node7.example")) << everywhere.endpoint();
}

TEST(SwarmTransport, EchoKeepsEveryByte) {
  RpcServer server("tcp://127.0.0.1:*");
  ServingThread serving(server, echo);
  RpcClient client;

  const std::vector<std::vector<char>> payloads = {
      bytes("activations"), {}, random_bytes(6 << 20, 1), std::vector<char>(3, '\0')};
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    const std::string header = "batch=" + std::to_string(i) + " round=7";
    const auto reply = client.call(server.endpoint(), {"forward", header, payloads[i]}, 10.0);
    ASSERT_TRUE(reply.has_value()) << "payload " << i;
    EXPECT_EQ(reply->method, "ok");
    EXPECT_EQ(reply->header, header);
    EXPECT_EQ(reply->payload, payloads[i]) << "payload " << i;
  }
}

// With the swarm's secret, signed requests are served byte for byte; a client without the secret,
// or with another, is refused before the handler runs, and told so.
TEST(SwarmTransport, ASecretServesSignedRequestsAndRefusesOthers) {
  const auto secret_of = [](const std::string& text) {
    return std::make_shared<const SharedSecret>(SharedSecret::from_bytes(text));
  };
  const auto secret = secret_of("the swarm's secret, 16+ bytes");
  RpcServer server("tcp://127.0.0.1:*", "127.0.0.1", secret);
  std::atomic<int> handled = 0;
  ServingThread serving(server, [&](const RpcMessage& request) {
    ++handled;
    return echo(request);
  });
  RpcClient member(secret);
  const std::vector<char> payload = random_bytes(1 << 20, 3);
  const auto reply = member.call(server.endpoint(), {"forward", "batch=1", payload}, 10.0);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->payload, payload);
  for (const auto& stranger : {std::make_unique<RpcClient>(),
                               std::make_unique<RpcClient>(secret_of("a guess, 16+ bytes long"))}) {
    try {
      stranger->call(server.endpoint(), {"forward", "batch=2", payload}, 10.0);
      ADD_FAILURE() << "a request without the secret was answered";
    } catch (const RpcError& error) {
      EXPECT_TRUE(contains(error.what(), "refused")) << error.what();
    }
  }
  EXPECT_EQ(handled, 1);
  EXPECT_EQ(server.refused(), 2);
}

TEST(SwarmTransport, HandlerExceptionIsTheCallersRpcError) {
  RpcServer server("tcp://127.0.0.1:*");
  ServingThread serving(server, [](const RpcMessage& request) {
    if (request.method == "backward") throw std::runtime_error("no activations for batch 3");
    return echo(request);
  });
  RpcClient client;

  try {
    client.call(server.endpoint(), {"backward", "batch=3", bytes("gradient")}, 5.0);
    FAIL() << "expected RpcError";
  } catch (const RpcError& error) {
    EXPECT_TRUE(contains(error.what(), "no activations for batch 3")) << error.what();
    EXPECT_TRUE(contains(error.what(), server.endpoint())) << error.what();
  }
  // The server goes on serving, and the client's socket to it still works.
  const auto reply = client.call(server.endpoint(), {"forward", "batch=4", bytes("x")}, 5.0);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->header, "batch=4");
}

TEST(SwarmTransport, ServerThatDoesNotServeCostsADeadline) {
  RpcServer silent("tcp://127.0.0.1:*");  // bound, but nobody calls serve_one
  std::string nobody;
  {
    RpcServer gone("tcp://127.0.0.1:*");
    nobody = gone.endpoint();
  }  // nothing is bound there any more
  RpcClient client;

  for (const std::string& endpoint : {silent.endpoint(), nobody}) {
    const Clock::time_point start = Clock::now();
    EXPECT_FALSE(client.call(endpoint, {"forward", "", bytes("x")}, 0.2).has_value()) << endpoint;
    const double waited = seconds_since(start);
    EXPECT_GE(waited, 0.2) << endpoint;
    EXPECT_LT(waited, 1.0) << endpoint;
  }
  EXPECT_EQ(client.traffic().at("forward").timeouts, 2);
  EXPECT_EQ(client.traffic().at("forward").calls, 2);
  EXPECT_EQ(client.traffic().at("forward").reply_bytes, 0);
  // The request that reached the silent server is still handed over when it serves at last (its
  // caller has gone, so the reply goes nowhere): swarm_transport.h tells handlers to expect it.
  std::string stale;
  EXPECT_TRUE(silent.serve_one(1.0, [&](const RpcMessage& request) {
    stale = request.method;
    return echo(request);
  }));
  EXPECT_EQ(stale, "forward");

  const Clock::time_point start = Clock::now();
  RpcServer idle("tcp://127.0.0.1:*");
  EXPECT_FALSE(idle.serve_one(0.05, echo));
  EXPECT_GE(seconds_since(start), 0.05);
}

TEST(SwarmTransport, LateReplyIsDroppedNotGivenToTheNextCall) {
  RpcServer server("tcp://127.0.0.1:*");
  ServingThread serving(server, [](const RpcMessage& request) {
    if (request.header == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return echo(request);
  });
  RpcClient client;

  EXPECT_FALSE(client.call(server.endpoint(), {"forward", "slow", bytes("first")}, 0.1));
  // The server is still sleeping on the first request; its reply to it goes out while this call
  // waits, and must not be taken for this one's.
  const auto second = client.call(server.endpoint(), {"forward", "fast", bytes("second")}, 5.0);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->header, "fast");
  EXPECT_EQ(second->payload, bytes("second"));
  const auto third = client.call(server.endpoint(), {"forward", "fast", bytes("third")}, 5.0);
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->payload, bytes("third"));
  EXPECT_EQ(client.traffic().at("forward").timeouts, 1);
}

TEST(SwarmTransport, TrafficCountsThePayloadsOnBothSides) {
  RpcServer server("tcp://127.0.0.1:*");
  RpcClient client;
  {
    // Replies twice the request's payload, so the directions are told apart.
    ServingThread serving(server, [](const RpcMessage& request) {
      std::vector<char> payload = request.payload;
      payload.insert(payload.end(), request.payload.begin(), request.payload.end());
      return RpcMessage{"ok", "", payload};
    });
    for (const auto& [method, size] : std::vector<std::pair<std::string, std::size_t>>{
             {"forward", 3}, {"forward", 1000}, {"backward", 0}, {"backward", 4096}}) {
      ASSERT_TRUE(client.call(server.endpoint(), {method, "h", std::vector<char>(size, 'a')}, 5.0));
    }
  }
  const RpcTrafficByMethod expected = {
      {"forward", RpcTraffic{.calls = 2, .request_bytes = 1003, .reply_bytes = 2006}},
      {"backward", RpcTraffic{.calls = 2, .request_bytes = 4096, .reply_bytes = 8192}}};
  EXPECT_EQ(client.traffic(), expected);
  EXPECT_EQ(server.traffic(), expected);
}

TEST(SwarmTransport, OneClientAlternatesBetweenTwoServers) {
  RpcServer first("tcp://127.0.0.1:*");
  RpcServer second("tcp://127.0.0.1:*");
  ServingThread serving_first(first, [](const RpcMessage&) {
    return RpcMessage{"ok", "first", {}};
  });
  ServingThread serving_second(second, [](const RpcMessage&) {
    return RpcMessage{"ok", "second", {}};
  });
  RpcClient client;

  for (int i = 0; i < 20; ++i) {
    const bool to_first = i % 2 == 0;
    const auto reply =
        client.call(to_first ? first.endpoint() : second.endpoint(), {"forward", "", {}}, 5.0);
    ASSERT_TRUE(reply.has_value()) << i;
    EXPECT_EQ(reply->header, to_first ? "first" : "second") << i;
  }
  EXPECT_EQ(client.traffic().at("forward").calls, 20);
}

TEST(SwarmTransport, BindingATakenPortThrowsNamingTheAddress) {
  RpcServer holder("tcp://127.0.0.1:*");
  try {
    RpcServer second(holder.endpoint());
    FAIL() << "expected the bind to fail";
  } catch (const std::runtime_error& error) {
    EXPECT_TRUE(contains(error.what(), holder.endpoint())) << error.what();
  }
}

}  // namespace
}  // namespace strata

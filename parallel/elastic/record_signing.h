// Authenticated membership (docs/ARCHITECTURE.md §2 "Authenticated membership"): what a shared
// secret signs, and the two formats that carry its proofs. Pure functions over bytes (HMAC-SHA256
// by OpenSSL's libcrypto); signed_store.h and gloo_communicator.h apply them.
//
// The secret: the bytes of a file the user protects (diloco.secret_file, swarm.secret_file),
// trailing whitespace and newlines dropped, at least 16 bytes left; a file that anyone but its
// owner may read is refused, as ssh refuses a private key. It is never printed: messages name the
// file, and its fingerprint (the first 8 hex digits of SHA-256("strata-secret-id" ‖ secret)) tells
// two workers' secrets apart without revealing either.
//
// A signed record, the value a store holds for `key` (store keys are printable ASCII):
//   "strata-signed-1 " <64 hex digits: HMAC(secret, "strata-record-1\0" ‖ key ‖ "\0" ‖ value)> "\n"
//   value
// The key is inside the MAC, so a record copied to another key is forged there. What a signature
// cannot stop: a store writer deleting records, or putting back a key's own earlier record (the
// readers of a counter that only grows, the heartbeats, count only increases).
//
// The handshake, on each new connection between two members before any tensor moves (each side
// sends both messages, then checks the other's):
//   hello  "strata-hello-1" (14 bytes) ‖ nonce (32 random bytes)                      46 bytes
//   proof  "strata-proof-1" ‖ HMAC(secret, "strata-proof-1\0" ‖ context ‖ "\0" ‖ sender rank
//          ‖ receiver rank ‖ sender's nonce ‖ receiver's nonce) (32)                   46 bytes
// ranks as 4-byte little-endian integers; `context` names the connection (the Gloo group's
// prefix), so a proof from one group or direction does not pass in another, and the nonces make
// every proof fresh. A peer without the secret cannot make the proof; a replayed one names old
// nonces.
//
// A SWARM request or reply (parallel/swarm/swarm_transport.h) carries, as a last frame,
//   HMAC(secret, "strata-rpc-1\0" ‖ "request" or "reply" ‖ id (8 bytes) ‖ then method, header and
//        payload, each as its 8-byte little-endian length and its bytes)                32 bytes
// so a message of another id, direction or content does not pass.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class SharedSecret {
 public:
  // Reads and checks the file; a missing, unreadable, too-short or loosely protected file throws
  // std::runtime_error naming `what` (the config key) and the path.
  static SharedSecret from_file(const std::string& path, const std::string& what);
  // For tests and fuzzing: the secret's bytes themselves.
  static SharedSecret from_bytes(std::string bytes);
  // The secret of the config key `what` naming `path`: null when the path is empty (no secret).
  static std::shared_ptr<const SharedSecret> of_config(const std::string& path,
                                                       const std::string& what);

  const std::string& path() const { return path_; }  // "" when made from bytes
  // The bytes, only to hand them to the job's other ranks (train/diloco/elastic_worker.cpp).
  const std::string& bytes() const { return bytes_; }
  std::string fingerprint() const;                                // 8 hex digits
  std::array<std::uint8_t, 32> mac(std::string_view data) const;  // HMAC-SHA256
  // HMAC-SHA256 of the parts' concatenation, without copying them together.
  std::array<std::uint8_t, 32> mac(std::initializer_list<std::string_view> parts) const;

 private:
  std::string bytes_, path_;
};

inline constexpr std::string_view kSignedRecordMagic = "strata-signed-1 ";

std::vector<char> sign_record(const SharedSecret& secret, const std::string& key,
                              const std::vector<char>& value);
// The value of a signed record of `key`, or nullopt when it is not one or its MAC is not the
// secret's for that key and value (compared in constant time).
std::optional<std::vector<char>> open_signed_record(const SharedSecret& secret,
                                                    const std::string& key,
                                                    const std::vector<char>& record);
// Whether `record` has the form of a signed record (whatever its MAC): an unauthenticated worker
// that reads one knows the group has a secret.
bool looks_signed(const std::vector<char>& record);

using HandshakeNonce = std::array<std::uint8_t, 32>;
using HandshakeMessage = std::array<std::uint8_t, 46>;
HandshakeNonce random_nonce();
HandshakeMessage handshake_hello(const HandshakeNonce& nonce);
// The nonce of a hello, or nullopt when `message` is not one.
std::optional<HandshakeNonce> parse_hello(const HandshakeMessage& message);
HandshakeMessage handshake_proof(const SharedSecret& secret, std::string_view context, int sender,
                                 int receiver, const HandshakeNonce& sender_nonce,
                                 const HandshakeNonce& receiver_nonce);
// Whether `message` is the proof `sender` owes `receiver` for these nonces.
bool check_proof(const SharedSecret& secret, std::string_view context, int sender, int receiver,
                 const HandshakeNonce& sender_nonce, const HandshakeNonce& receiver_nonce,
                 const HandshakeMessage& message);

using RpcMac = std::array<std::uint8_t, 32>;
RpcMac rpc_mac(const SharedSecret& secret, bool reply, std::string_view id, std::string_view method,
               std::string_view header, std::string_view payload);
// Whether `mac` (any length) is the message's, compared in constant time.
bool check_rpc_mac(const SharedSecret& secret, bool reply, std::string_view id,
                   std::string_view method, std::string_view header, std::string_view payload,
                   std::string_view mac);

}  // namespace strata

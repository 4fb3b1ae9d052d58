// Fuzz target: the handshake messages a member receives from a peer before any tensor moves
// (parallel/elastic/record_signing.h, gloo_communicator.h).
//
// Input: up to 92 bytes, a hello then a proof (zeros where the input is short). A hello parses
// only with its magic; the proof passes only if it is exactly the proof the secret makes for the
// hello's nonce (a peer without the secret cannot pass).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "parallel/elastic/record_signing.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const strata::SharedSecret secret =
      strata::SharedSecret::from_bytes("the fuzz targets' secret, 32 bytes");
  strata::HandshakeMessage hello{}, proof{};
  std::memcpy(hello.data(), data, std::min(size, hello.size()));
  if (size > hello.size())
    std::memcpy(proof.data(), data + hello.size(), std::min(size - hello.size(), proof.size()));
  const std::optional<strata::HandshakeNonce> nonce = strata::parse_hello(hello);
  if (!nonce) return 0;
  if (strata::handshake_hello(*nonce) != hello) {
    std::fprintf(stderr, "fuzz finding: a hello parsed that is not the hello of its nonce\n");
    std::abort();
  }
  strata::HandshakeNonce mine{};
  mine.fill(7);
  const bool passed = strata::check_proof(secret, "g/gloo/5", 1, 0, *nonce, mine, proof);
  if (passed != (proof == strata::handshake_proof(secret, "g/gloo/5", 1, 0, *nonce, mine))) {
    std::fprintf(stderr, "fuzz finding: a proof passed that the secret does not make\n");
    std::abort();
  }
  return 0;
}

// SHA-256 by OpenSSL's libcrypto (its one-shot EVP digest), rather than a hand-written one: the
// library is already on every machine that has HDF5 and is what the rest of the world checks
// digests with.
#include "data/sha256.h"

#include <openssl/evp.h>

#include <array>

#include "model/core/error.h"

namespace strata {

std::string sha256_hex(std::string_view bytes) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  STRATA_CHECK(
      EVP_Digest(bytes.data(), bytes.size(), digest.data(), &length, EVP_sha256(), nullptr) == 1 &&
          length == 32,
      "libcrypto's SHA-256 failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 0xf];
  }
  return hex;
}

}  // namespace strata

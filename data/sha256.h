// SHA-256 (FIPS 180-4) of a byte string, as 64 lowercase hex digits.
//
// Used to fingerprint tokenizer models: every token shard records the SHA-256 of the model that
// produced it, so a run can refuse shards made by a different tokenizer. Computed by OpenSSL's
// libcrypto.
#pragma once

#include <string>
#include <string_view>

namespace strata {

std::string sha256_hex(std::string_view bytes);

}  // namespace strata

// SHA-256 (FIPS 180-4) of a byte string, as 64 lowercase hex digits.
//
// Used to fingerprint tokenizer models: every token shard records the SHA-256 of the model that
// produced it, so a run can refuse shards made by a different tokenizer. Own implementation to
// keep the data module free of a crypto dependency; speed is secondary (models are a few MB).
#pragma once

#include <string>
#include <string_view>

namespace strata {

std::string sha256_hex(std::string_view bytes);

}  // namespace strata

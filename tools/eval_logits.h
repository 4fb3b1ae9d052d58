// `eval --logits FILE.npy`: the model's logits over the evaluation windows (docs/ARCHITECTURE.md
// §5), for comparison with another implementation (tests/python/hf_gpt2.py checks them against
// transformers'). The file is a NumPy .npy array, float32, shape [windows, T, vocab_size]: the
// unpadded vocabulary, window i's inputs being tokens [i·T, i·T+T) of the split. It holds
// windows·T·vocab_size·4 bytes, so a run over many tokens or a large vocabulary makes a large file:
// --tokens bounds it.
#pragma once

#include <cstdint>
#include <string>

#include "data/token_shards.h"
#include "model/gpt.h"

namespace strata {

// Runs the windows of the first n_tokens of `split`, micro_batch per forward, and writes their
// logits to `path`. Returns the number of windows written.
std::int64_t write_eval_logits(const std::string& path, Gpt<float>& model, const float* params,
                               const TokenSource& split, std::int64_t n_tokens, int micro_batch);

}  // namespace strata

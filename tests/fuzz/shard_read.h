// What the shard fuzz targets do with a split once it is on disk: everything training and
// evaluation do with one (data/token_shards.h, data/loader.h), bounded so that a shard claiming
// billions of tokens costs no more than one holding a few.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/token_shards.h"
#include "tests/fuzz/fuzz_support.h"

namespace strata::fuzz {

inline void read_split(const std::string& spec, int seq_len) {
  expect_user_errors_only([&] {
    const TokenSource source = TokenSource::open(spec);
    constexpr std::uint64_t kWindow = 4096;
    std::vector<std::int32_t> tokens(kWindow);
    const std::uint64_t size = source.size();
    // The first and last window of the stream, and one past its end (must be an Error).
    source.read(0, static_cast<std::size_t>(std::min(size, kWindow)), tokens.data());
    const std::uint64_t tail = std::min(size, kWindow);
    source.read(size - tail, static_cast<std::size_t>(tail), tokens.data());
    expect_user_errors_only([&] { source.read(size, 1, tokens.data()); });

    const WindowSampler sampler(source, seq_len, /*seed=*/size);
    std::vector<std::int32_t> inputs(static_cast<std::size_t>(seq_len));
    std::vector<std::int32_t> targets(inputs.size());
    for (const std::uint64_t sample : {std::uint64_t{0}, std::uint64_t{1}, size, ~std::uint64_t{0}})
      sampler.sample(sample, inputs.data(), targets.data());
    const std::uint64_t windows = eval_window_count(source, ~std::uint64_t{0}, seq_len);
    if (windows > 0) eval_window(source, windows - 1, seq_len, inputs.data(), targets.data());
    expect_user_errors_only(
        [&] { eval_window(source, windows, seq_len, inputs.data(), targets.data()); });
  });
}

}  // namespace strata::fuzz

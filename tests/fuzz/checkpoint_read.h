// What the checkpoint fuzz targets do with a checkpoint file: everything the tools and a resume do
// with one before it trains (train/checkpoint/checkpoint_verify.h, train/checkpoint/checkpoint.h,
// train/checkpoint/saved_model.h).
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_verify.h"
#include "train/checkpoint/saved_model.h"

namespace strata::fuzz {

inline void read_checkpoint_file(const std::string& path, const ModelConfig& run_model) {
  expect_user_errors_only([&] { verify_checkpoint(path); });  // ckpt verify, --resume's choice
  expect_user_errors_only([&] { check_resumable(path, run_model, 1, OptimizerName::adamw); });
  expect_user_errors_only([&] {  // ckpt diff
    for_each_checkpoint_tensor(path, [](const std::string&, const std::vector<float>&) {});
  });
  expect_user_errors_only([&] {  // eval, generate, ckpt export-hf
    const SavedModel saved = load_saved_model(path, 1);
    const CheckpointState& state = saved.state;
    // What a resume trusts: attributes carry no checksum, so the reader checks their ranges.
    if (state.step < 0 || state.data_position < 0 || state.adam_steps < 0 ||
        !(state.loss_scale > 0) || !std::isfinite(state.loss_scale)) {
      std::fprintf(stderr, "fuzz finding: a checkpoint's state was accepted out of range\n");
      std::abort();
    }
  });
}

}  // namespace strata::fuzz

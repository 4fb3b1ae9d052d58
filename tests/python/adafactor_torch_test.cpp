// Strata's Adafactor (train/optimizer/adafactor.h) against PyTorch's own torch.optim.Adafactor
// (tests/python/adafactor_torch.py, in float64): the relative step with torch's defaults (eps1
// float32's epsilon, eps2 1e-3, β2 decay −0.8, clipping d 1, no first moment) and decoupled weight
// decay on the 2-D weights, over every tensor of a small model for four steps of a falling
// learning rate. Torch's form is the one Strata implements, so each parameter must agree to
// 1e-5; the same comparison with Strata's fixed step size (not torch's) must fail, which shows it
// can.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "model/parameter_layout.h"
#include "tests/support/optimizer_runs.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

const std::string kPython = testing::source_dir() + "/.venv-test/bin/python";
const std::string kScript = testing::source_dir() + "/tests/python/adafactor_torch.py";

OptimizerConfig torch_defaults(bool relative_step) {
  OptimizerConfig config;
  config.name = OptimizerName::adafactor;
  config.weight_decay = 0.1;
  config.adafactor.relative_step = relative_step;
  config.adafactor.beta1 = 0.0;
  return config;
}

void write_floats(const std::string& path, const std::vector<float>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
  ASSERT_TRUE(out.good()) << path;
}

// The whole buffer's tensors in logical order (the layout of one process is logical already).
std::vector<float> logical_order(const ParameterLayout& layout, const std::vector<float>& buffer) {
  std::vector<float> out;
  for (const TensorView& t : layout.tensors())
    out.insert(out.end(), buffer.begin() + static_cast<std::ptrdiff_t>(t.offset),
               buffer.begin() + static_cast<std::ptrdiff_t>(t.offset + t.size));
  return out;
}

// Runs Strata's Adafactor on the whole buffer, writes what adafactor_torch.py reads, runs it.
testing::CommandResult compare_with_torch(const OptimizerConfig& config, const std::string& dir) {
  const ParameterLayout layout = ParameterLayout::for_gpt(testing::kOptimizerShape);
  const std::size_t buffer = layout.padded_total(1);
  std::ofstream tensors(dir + "/tensors.txt");
  for (const TensorView& t : layout.tensors()) {
    const bool matrix = t.shape.size() == 2;
    tensors << t.name << ' ' << (matrix ? t.shape[0] : 1) << ' '
            << (matrix ? t.shape[1] : static_cast<std::int64_t>(t.size)) << ' ' << (t.decay ? 1 : 0)
            << ' ' << t.size << '\n';
  }
  tensors.close();
  std::ofstream lr(dir + "/lr.txt");
  lr.precision(17);
  for (int step = 1; step <= testing::kOptimizerSteps; ++step) {
    lr << testing::step_lr(step) << '\n';
    write_floats(dir + "/grads_" + std::to_string(step) + ".f32",
                 logical_order(layout, testing::layout_values(layout, buffer, 100 + step)));
  }
  lr.close();
  write_floats(dir + "/params.f32",
               logical_order(layout, testing::layout_values(layout, buffer, 1)));
  const std::vector<float> params =
      testing::optimizer_run(layout, {0, buffer}, buffer, config, {}, 1.0);
  write_floats(dir + "/strata.f32", logical_order(layout, params));
  const AdafactorConfig& a = config.adafactor;
  char flags[256];
  std::snprintf(flags, sizeof flags,
                " --eps1 %.17g --eps2 %.17g --beta2-decay %.17g --d %.17g --weight-decay %.17g",
                a.eps1, a.eps2, a.decay_rate, a.clip_threshold, config.weight_decay);
  return testing::run_command(kPython + " " + kScript + " " + dir + flags);
}

TEST(AdafactorTorch, RelativeStepMatchesTorchOptimAdafactor) {
  ASSERT_TRUE(testing::fs::exists(kPython))
      << kPython << " is missing: run scripts/setup_python.sh (it makes .venv-test, with torch)";
  testing::TempDir dir("adafactor_torch");
  const auto run = compare_with_torch(torch_defaults(true), dir.str());
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("largest relative difference"), std::string::npos) << run.output;
  std::cout << run.output;
}

TEST(AdafactorTorch, AFixedStepSizeDoesNotMatchTorchsRelativeStep) {
  ASSERT_TRUE(testing::fs::exists(kPython)) << kPython << " is missing";
  testing::TempDir dir("adafactor_torch");
  const auto run = compare_with_torch(torch_defaults(false), dir.str());
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("largest relative difference"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace strata

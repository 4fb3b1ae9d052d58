// scripts/kernel_profile.py, which turns Nsight Compute's per-launch durations (gpu_check.sh
// profile) into each kernel's share of the GPU time: launches of one kernel merge whatever their
// template arguments, units convert, the largest comes first, and a file without ncu's CSV is one
// `error:` line with a non-zero exit.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/support/test_support.h"

namespace strata {
namespace {

const std::string kScript = testing::source_dir() + "/scripts/kernel_profile.py";

std::string csv_row(int id, const std::string& kernel, const std::string& unit,
                    const std::string& value) {
  return "\"" + std::to_string(id) + "\",\"" + kernel + "\",\"gpu__time_duration.sum\",\"" + unit +
         "\",\"" + value + "\"\n";
}

TEST(KernelProfile, SumsLaunchesPerKernelLargestFirst) {
  testing::TempDir dir("kernel_profile");
  const std::string path = dir / "ncu.csv";
  std::ofstream(path)
      << "==PROF== Connected to process 1\n"
      << "\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n"
      << csv_row(0,
                 "void strata::cuda::flash::(anonymous namespace)::forward_registers_kernel"
                 "<__nv_bfloat16, 64>(T1 *, float *, const T1 *, int, int, float)",
                 "usecond", "100.50")
      << csv_row(1,
                 "void strata::cuda::flash::(anonymous namespace)::forward_registers_kernel"
                 "<__half, 48>(T1 *, float *, const T1 *, int, int, float)",
                 "nsecond", "99,500")
      << csv_row(2, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "msecond", "1.8");
  const auto run = testing::run_command("python3 " + kScript + " " + path);
  ASSERT_EQ(run.status, 0) << run.output;
  const auto gemm = run.output.find("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n");
  const auto attention = run.output.find("strata::cuda::flash::forward_registers_kernel ");
  ASSERT_NE(gemm, std::string::npos) << run.output;
  ASSERT_NE(attention, std::string::npos) << run.output;
  EXPECT_LT(gemm, attention) << run.output;  // 1.8 ms before 0.2 ms
  // 100.5 µs + 99.5 µs over 2 launches: 0.200 ms, 10 % of 2.0 ms, 100 µs each.
  EXPECT_NE(run.output.find("forward_registers_kernel        "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("0.200  10.0%        2     100.0"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("1.800  90.0%        1    1800.0"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("total (2 kernels)"), std::string::npos) << run.output;
}

TEST(KernelProfile, FileWithoutNcuCsvIsAnError) {
  testing::TempDir dir("kernel_profile");
  const std::string path = dir / "not_ncu.csv";
  std::ofstream(path) << "==PROF== Disconnected\n";
  const auto run = testing::run_command("python3 " + kScript + " " + path);
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("error: "), std::string::npos) << run.output;
}

}  // namespace
}  // namespace strata

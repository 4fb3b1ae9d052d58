// The `bench` tool end to end: `bench train --config` runs a config's model and reports one JSON
// line with throughput, MFU against a peak, memory and the options it ran with; the flag form
// keeps the keys scripts/bench_cpu.sh reads; bad flags, bad configs and `device: cuda` end with one
// `error:` line and a non-zero exit; `bench checkpoint` writes, verifies and removes a checkpoint.
// Timings are never asserted, only that they are positive. Also the GPU peak table's matching of
// CUDA device names.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "model/kernels/cpu/blas.h"
#include "tests/support/test_support.h"
#include "tools/gpu_peaks.h"
#include "train/backend/cuda_training.h"

namespace strata {
namespace {

using testing::TempDir;

// A model small enough that two steps take milliseconds.
constexpr const char* kTinyConfig =
    "run:   {name: bench, seed: 5}\n"
    "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 64}\n"
    "data:  {train: unused/by/bench}\n"
    "train: {global_batch: 4, micro_batch: 2}\n"
    "device: cpu\n";

class BenchTool : public ::testing::Test {
 protected:
  void SetUp() override { std::ofstream(config_) << kTinyConfig; }
  testing::CommandResult bench(const std::string& args) const {
    return testing::run_command("OMP_NUM_THREADS=2 " + testing::bin("bench") + " " + args);
  }
  TempDir dir_{"bench_tool"};
  std::string config_ = dir_ / "tiny.yaml";
};

// The raw JSON value of `key` in a one-line object ("" when absent).
std::string json_value(const std::string& line, const std::string& key) {
  const std::string needle = "\"" + key + "\": ";
  const auto at = line.find(needle);
  if (at == std::string::npos) return "";
  const auto begin = at + needle.size();
  if (line[begin] == '"') return line.substr(begin + 1, line.find('"', begin + 1) - begin - 1);
  return line.substr(begin, line.find_first_of(",}", begin) - begin);
}

double json_number(const std::string& line, const std::string& key) {
  const std::string value = json_value(line, key);
  EXPECT_FALSE(value.empty()) << "no \"" << key << "\" in " << line;
  return std::strtod(value.c_str(), nullptr);
}

// One line of output, a JSON object.
void expect_one_json_line(const testing::CommandResult& result) {
  ASSERT_EQ(result.status, 0) << result.output;
  ASSERT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
  EXPECT_EQ(result.output.front(), '{') << result.output;
  EXPECT_EQ(result.output.substr(result.output.size() - 2), "}\n") << result.output;
}

void expect_error_line(const testing::CommandResult& result, const std::string& mentions) {
  EXPECT_NE(result.status, 0) << result.output;
  EXPECT_TRUE(result.output.starts_with("error: ")) << result.output;
  EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
  EXPECT_NE(result.output.find(mentions), std::string::npos) << result.output;
}

TEST_F(BenchTool, TrainRunsTheConfigAndReportsThroughputMfuAndMemory) {
  const auto result = bench("train --config " + config_ + " --steps 2 --warmup 0 --peak 1");
  expect_one_json_line(result);
  const std::string& line = result.output;
  EXPECT_EQ(json_value(line, "bench"), "train");
  EXPECT_EQ(json_value(line, "config"), config_);
  EXPECT_EQ(json_value(line, "device"), "cpu");
  EXPECT_EQ(json_number(line, "n_layer"), 2);
  EXPECT_EQ(json_number(line, "d_model"), 32);
  EXPECT_EQ(json_number(line, "seq_len"), 16);
  EXPECT_EQ(json_number(line, "micro_batch"), 2);
  EXPECT_EQ(json_number(line, "tokens_per_step"), 32);
  EXPECT_EQ(json_number(line, "steps"), 2);
  EXPECT_EQ(json_value(line, "compute"), "fp32");
  EXPECT_EQ(json_value(line, "recompute"), "none");
  EXPECT_GT(json_number(line, "params"), 0);
  EXPECT_GT(json_number(line, "step_ms"), 0);
  EXPECT_GT(json_number(line, "tokens_per_s"), 0);
  EXPECT_GT(json_number(line, "model_tflops"), 0);
  EXPECT_EQ(json_number(line, "peak_tflops"), 1);
  EXPECT_EQ(json_value(line, "peak_source"), "--peak");
  // A two-layer d_model 32 model cannot come near 1 TFLOP/s on a CPU.
  EXPECT_GT(json_number(line, "mfu"), 0);
  EXPECT_LT(json_number(line, "mfu"), 1);
  EXPECT_GT(json_number(line, "peak_rss_mib"), 0);
  EXPECT_GT(json_number(line, "activation_mib"), 0);
  EXPECT_GT(json_number(line, "activation_mib_per_layer"), 0);
  EXPECT_LT(json_number(line, "activation_mib_per_layer"), json_number(line, "activation_mib"));
  EXPECT_EQ(json_number(line, "loss_scale"), 1);
  EXPECT_EQ(json_number(line, "skipped_steps"), 0);
  EXPECT_GT(json_number(line, "final_loss"), 0);
}

TEST_F(BenchTool, TrainTakesPrecisionAndRecomputeFromSetOverrides) {
  const auto none = bench("train --config " + config_ + " --steps 2 --warmup 0 --peak 1");
  const auto full = bench("train --config " + config_ +
                          " --set precision.compute=fp16 --set recompute=full --steps 2 --warmup 0"
                          " --peak 1");
  expect_one_json_line(none);
  expect_one_json_line(full);
  EXPECT_EQ(json_value(full.output, "compute"), "fp16");
  EXPECT_EQ(json_value(full.output, "recompute"), "full");
  EXPECT_EQ(json_number(full.output, "loss_scale"), 65536);  // precision.initial_loss_scale
  // Full recomputation keeps only each block's input: less activation memory per layer.
  EXPECT_LT(json_number(full.output, "activation_mib_per_layer"),
            json_number(none.output, "activation_mib_per_layer"));
}

TEST_F(BenchTool, TrainMeasuresTheSgemmPeakWithoutPeakFlag) {
  const auto result = bench("train --config " + config_ + " --steps 1 --warmup 0");
  expect_one_json_line(result);
  EXPECT_EQ(json_value(result.output, "peak_source"), "measured sgemm 2048^3");
  EXPECT_GT(json_number(result.output, "peak_tflops"), 0);
  EXPECT_GT(json_number(result.output, "mfu"), 0);
}

TEST_F(BenchTool, TrainFlagFormKeepsItsKeys) {
  const auto result = bench(
      "train --n-layer 1 --n-head 2 --d-model 32 --seq-len 16 --vocab 64 --micro-batch 2 "
      "--steps 2 --warmup 0 --peak 1");
  expect_one_json_line(result);
  // The keys scripts/bench_cpu.sh and docs/PERFORMANCE.md read.
  for (const char* key :
       {"n_layer", "n_head", "d_model", "seq_len", "vocab", "micro_batch", "params", "steps",
        "step_ms", "tokens_per_s", "gflops", "peak_rss_mib", "final_loss"})
    EXPECT_FALSE(json_value(result.output, key).empty()) << key << " missing: " << result.output;
  EXPECT_EQ(json_value(result.output, "bench"), "train");
  EXPECT_EQ(json_number(result.output, "n_layer"), 1);
  EXPECT_EQ(json_value(result.output, "compute"), "fp32");
  EXPECT_GT(json_number(result.output, "tokens_per_s"), 0);
}

TEST_F(BenchTool, SgemmNamesTheBlasLibraryItsThreadingAndKernels) {
  // The default (oneDNN where it loads), then each library asked for by STRATA_BLAS. OpenBLAS's
  // core is the one this CPU's feature flags call for, never its own guess from the model
  // number (which takes a CPU it does not know for a Pentium 4, "Prescott").
  const std::string expected_core = cpu::openblas_core_for(cpu::CpuFeatures::of_this_cpu());
  // oneDNN is not run in AddressSanitizer builds: LeakSanitizer crashes on its threads at exit
  // (blas.h); the Release build of the README's test command runs it.
  std::vector<std::string> libraries{"", "openblas"};
  if (!cpu::kAddressSanitizerBuild) libraries.push_back("onednn");
  for (const std::string& library : libraries) {
    SCOPED_TRACE(library);
    const auto result =
        testing::run_command((library.empty() ? "" : "STRATA_BLAS=" + library + " ") +
                             "OMP_NUM_THREADS=2 env -u OPENBLAS_CORETYPE " + testing::bin("bench") +
                             " sgemm --m 64 --n 48 --k 32 --repeats 2");
    ASSERT_EQ(result.status, 0) << result.output;
    EXPECT_EQ(json_value(result.output, "blas"), library.empty() ? cpu::kDefaultBlas : library);
    EXPECT_EQ(json_value(result.output, "blas_threading"), "OpenMP");
    EXPECT_GT(json_number(result.output, "gflops"), 0);
    if (library == "openblas") {
      EXPECT_NE(json_value(result.output, "blas_kernels"), "Prescott");
      if (!expected_core.empty()) {
        EXPECT_EQ(json_value(result.output, "blas_kernels"), expected_core);
      }
    }
  }
  const auto wrong = testing::run_command("STRATA_BLAS=mkl " + testing::bin("bench") +
                                          " sgemm --m 8 --n 8 --k 8 --repeats 1");
  EXPECT_NE(wrong.status, 0);
  EXPECT_NE(wrong.output.find("error: STRATA_BLAS must be onednn, openblas or blis, got 'mkl'"),
            std::string::npos)
      << wrong.output;
}

TEST_F(BenchTool, CheckpointWritesVerifiesAndRemovesAFormat4File) {
  const auto result =
      bench("checkpoint --n-layer 1 --n-head 2 --d-model 32 --seq-len 16 --vocab 64 --dir " +
            (dir_ / "checkpoints"));
  expect_one_json_line(result);
  EXPECT_EQ(json_value(result.output, "format"), "strata-checkpoint-4");
  EXPECT_EQ(json_number(result.output, "tensors"), 48);  // 16 per buffer: model, m, v
  for (const char* key : {"write_s", "verify_s", "checksum_bytes_gib_per_s"})
    EXPECT_GT(json_number(result.output, key), 0) << key;
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / "checkpoints"));
}

TEST_F(BenchTool, AttentionOnTheCpuReportsTimesAndScratch) {
  const auto result =
      bench("attention --device cpu --batch 2 --seq-len 96 --heads 2 --head-size 16 --repeats 1");
  expect_one_json_line(result);
  const std::string& line = result.output;
  EXPECT_EQ(json_value(line, "device"), "cpu");
  EXPECT_EQ(json_number(line, "seq_len"), 96);
  for (const char* key : {"forward_ms", "backward_ms", "forward_tflops", "backward_tflops",
                          "forward_scratch_bytes", "backward_scratch_bytes"})
    EXPECT_GT(json_number(line, key), 0) << key;
}

TEST_F(BenchTool, BadRequestsEndWithOneErrorLine) {
  // device cuda is refused before any work where no GPU is usable (with one it runs).
  if (cuda_device_count() == 0) {
    expect_error_line(bench("train --config " + config_ + " --set device=cuda --steps 1"),
                      "device cuda");
    expect_error_line(bench("attention --device cuda --repeats 1"), "CUDA");
  }
  expect_error_line(bench("attention --dtype fp8"), "--dtype must be fp32, bf16 or fp16");
  expect_error_line(bench("attention --device tpu"), "--device must be auto, cpu or cuda");
  expect_error_line(bench("train --config " + config_ + " --bogus 1"), "unknown option '--bogus'");
  expect_error_line(bench("train --config " + config_ + " --steps"), "--steps needs a value");
  expect_error_line(bench("train --config " + config_ + " --steps 0"), "--steps must be positive");
  expect_error_line(bench("train --config " + config_ + " --peak fast"), "--peak must be a number");
  expect_error_line(bench("train --config " + config_ + " --set model.n_layr=3"),
                    "did you mean 'model.n_layer'?");
  expect_error_line(bench("train --config " + config_ + " --n-layer 3"), "--set model.n_layer=");
  expect_error_line(bench("train --config " + (dir_ / "missing.yaml")), "missing.yaml");
  expect_error_line(bench("train --set recompute=full"), "--set needs --config");
  expect_error_line(bench("warp"), "unknown benchmark 'warp'");
}

TEST(GpuPeaks, CudaDeviceNamesMatchTheirDatasheetPeaks) {
  const auto bf16 = [](const char* name) {
    const auto peak = gpu_peak_for_device(name);
    return peak ? peak->bf16_dense_tflops : -1.0;
  };
  EXPECT_EQ(bf16("NVIDIA A100-SXM4-80GB"), 312);
  EXPECT_EQ(bf16("NVIDIA A100-PCIE-40GB"), 312);
  EXPECT_EQ(bf16("NVIDIA A100 80GB PCIe"), 312);
  EXPECT_EQ(bf16("NVIDIA H100 80GB HBM3"), 989);
  EXPECT_EQ(bf16("NVIDIA H100 PCIe"), 756);
  EXPECT_EQ(bf16("NVIDIA H100 NVL"), 835);
  EXPECT_EQ(bf16("NVIDIA H200"), 989);
  EXPECT_EQ(bf16("NVIDIA H200 NVL"), 835);
  EXPECT_EQ(bf16("NVIDIA GH200 480GB"), 989);
  EXPECT_EQ(gpu_peak_for_device("NVIDIA H100 80GB HBM3")->fp32_tflops, 67);
  EXPECT_EQ(gpu_peak_for_device("NVIDIA A100-SXM4-40GB")->fp32_tflops, 19.5);
  // Not in the table, and not to be mistaken for a part that is.
  EXPECT_EQ(bf16("NVIDIA RTX A1000"), -1);
  EXPECT_EQ(bf16("NVIDIA GeForce RTX 4090"), -1);
  EXPECT_EQ(bf16(""), -1);
}

}  // namespace
}  // namespace strata

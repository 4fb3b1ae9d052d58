// The CUDA backend under every parallel mode: runs of `device: cuda` at each (dp, tp, pp) layout,
// with every schedule (zb-h1, zb-h2 and zbv splitting the backward, interleaved and zbv holding two
// chunks of layers per rank), sequence parallelism and recomputation, train the fp32 run of one CPU
// process (loss and val_loss per step within 1e-4 relative, the bound between CPU layouts); a bf16
// layout trains the bf16 run of one CUDA process; and a checkpoint written by a CUDA layout resumes
// on the CPU at another layout and continues the same run. ZeRO stages 1-3 and ZeRO++ on the device
// follow the CPU process too, and so does every optimizer run on the host (optimizer.offload). A
// mixture-of-experts model (as tests/mpi/moe_layouts_test.cpp's) on the device trains the CPU
// process's run with the same routing figures in its metrics, alone and under tp 2 with sequence
// parallelism, pp 2 with zb-h1 and full recomputation, and dp 2; and with its experts split (expert
// parallelism, the rows exchanged through the host): ep 2 of dp 2, ep 2 of dp 4 under ZeRO-2 (the
// dense gradients summed over ep before the reduce-scatter over expert_dp), and ep 2 of dp 2 under
// tp 2 with sequence parallelism. Context parallelism (cp 2 and 4, ring and all_gather) with tp,
// pp, ZeRO 3 and recomputation follows it too, and FP8 (tensorwise, delayed) the CPU's emulation.
// On a machine with one GPU all ranks share it through host-staged collectives (NCCL needs a GPU
// per rank) and NCCL itself runs over one rank; with several GPUs, device_comm auto carries the
// layouts over NCCL.
//
// Exits with 77 (reported skipped by CTest, never passed) where no CUDA device is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>

#include "tests/mpi/layout_runs.h"
#include "tests/support/test_support.h"
#include "train/backend/cuda_training.h"

namespace strata {
namespace {

using testing::expect_close;
using testing::Layout;
using testing::metric;
using testing::TempDir;
using testing::train;

class CudaLayouts : public testing::LayoutSuite<CudaLayouts> {
 public:
  static constexpr const char* kTag = "cuda_layouts";
  static constexpr int kHeads = 2;
  // 2 heads of 16, the smallest head size the CUDA attention kernel takes, on the CPU.
  static Layout reference() {
    Layout cpu;
    cpu.device = "cpu";
    return cpu;
  }
};

TEST_F(CudaLayouts, EveryLayoutTrainsTheRunOfOneCpuProcess) {
  const auto reference = metric(reference_dir_, "loss");
  const auto reference_val = metric(reference_dir_, "val_loss");
  ASSERT_EQ(reference.size(), 20u);
  const std::vector<Layout> layouts = {
      Layout{},
      Layout{2, 1, 1},
      Layout{1, 2, 1},
      Layout{1, 2, 1, "1f1b", true},
      Layout{1, 1, 2},
      Layout{1, 1, 2, "gpipe"},
      Layout{1, 1, 4},
      Layout{2, 2, 2, "1f1b", true},
      Layout{1, 2, 2, "gpipe", false, "selective"},
      Layout{1, 2, 2, "1f1b", true, "full"},
      Layout{1, 1, 1, "zb-h1"},  // a lone stage: the fused forward_backward
      Layout{1, 1, 4, "zb-h1"},
      Layout{1, 2, 2, "zb-h1", true, "full"},
      Layout{2, 1, 2, "zb-h1", false, "selective"},
      Layout{1, 1, 4, "zb-h2"},  // queued sends
      Layout{2, 2, 2, "zb-h2", true},
      Layout{1, 1, 2, "interleaved", false, "none", "fp32", "", 2},  // a model per chunk
      Layout{2, 2, 2, "zbv", true, "selective", "fp32", "", 2},      // the V's turn in place
  };
  for (Layout layout : layouts) {
    layout.device = "cuda";
    SCOPED_TRACE(layout.name());
    const std::string run = train(*dir_, layout, layout.name());
    expect_close(metric(run, "loss"), reference, 0, "loss", 1e-4);
    expect_close(metric(run, "val_loss"), reference_val, 0, "val_loss", 1e-4);
    EXPECT_FALSE(metric(run, "device_mib").empty()) << "the run did not train on the GPU";
  }
}

// Context parallelism on the device (the attention's chunk pairs, the K/V blocks staged through
// the host by ring and all_gather): cp 2 and 4 alone, with tp 2 and sequence parallelism, with pp
// 2 under zb-h1, with dp 2 under ZeRO 3, with full recomputation; the CPU process's run, and bytes
// moved over the cp group.
TEST_F(CudaLayouts, ContextParallelLayoutsTrainTheRunOfOneCpuProcess) {
  const auto reference = metric(reference_dir_, "loss");
  const auto reference_val = metric(reference_dir_, "val_loss");
  ASSERT_EQ(reference.size(), 20u);
  const auto with_cp = [](Layout layout, int cp, const char* comm) {
    layout.device = "cuda";
    layout.cp = cp;
    layout.cp_comm = comm;
    return layout;
  };
  const std::pair<Layout, std::string> runs[] = {
      {with_cp(Layout{}, 2, "ring"), ""},
      {with_cp(Layout{}, 4, "all_gather"), ""},
      {with_cp(Layout{1, 2, 1, "1f1b", true}, 2, "ring"), ""},
      {with_cp(Layout{1, 1, 2, "zb-h1"}, 2, "all_gather"), ""},
      {with_cp(Layout{2, 1, 1}, 2, "ring"), " --set parallel.zero.stage=3"},
      {with_cp(Layout{1, 1, 1, "1f1b", false, "full"}, 2, "ring"), ""},
  };
  for (const auto& [layout, extra] : runs) {
    SCOPED_TRACE(layout.name() + extra);
    const std::string run = train(*dir_, layout, layout.name() + "_cp", extra);
    expect_close(metric(run, "loss"), reference, 0, "loss", 1e-4);
    expect_close(metric(run, "val_loss"), reference_val, 0, "val_loss", 1e-4);
    EXPECT_GT(testing::logged(run, 1, "\"cp\": "), 0.0);
  }
}

// ZeRO on the device: stages 1-3 (2 and 3 stage their segments through the host) and ZeRO-3 with
// hpZ (exact) follow the CPU process; the quantised switches stay within 1e-2.
TEST_F(CudaLayouts, ZeroStagesTrainTheRunOfOneCpuProcess) {
  const auto reference = metric(reference_dir_, "loss");
  const std::string stage = " --set parallel.gpus_per_node=2 --set parallel.zero.stage=";
  const std::pair<Layout, std::string> runs[] = {
      {Layout{2, 1, 1}, stage + "1"},
      {Layout{2, 1, 1}, stage + "2"},
      {Layout{2, 2, 1, "1f1b", true}, stage + "3"},
      {Layout{2, 1, 2}, stage + "3 --set parallel.zero.gradient_reduction=micro_batch"},
      {Layout{2, 1, 2, "zb-h1"}, stage + "2"},
      {Layout{2, 1, 2, "zbv", false, "none", "fp32", "", 2}, stage + "2"},  // wte read twice
      {Layout{2, 1, 2, "interleaved", false, "none", "fp32", "", 2}, stage + "3"},
      {Layout{4, 1, 1}, stage + "3 --set parallel.zero.hierarchical_partition=true"},
  };
  int index = 0;
  for (auto [layout, settings] : runs) {
    layout.device = "cuda";
    SCOPED_TRACE(layout.name() + settings);
    const std::string run =
        train(*dir_, layout, "zero_" + std::to_string(index++) + "_" + layout.name(), settings);
    expect_close(metric(run, "loss"), reference, 0, "loss", 1e-4);
  }
  Layout quantised{4, 1, 1};
  quantised.device = "cuda";
  const std::string run = train(*dir_, quantised, "zero_plus_plus",
                                stage +
                                    "3 --set parallel.zero.quantized_weights=true"
                                    " --set parallel.zero.hierarchical_partition=true"
                                    " --set parallel.zero.quantized_gradients=true");
  expect_close(metric(run, "loss"), reference, 0, "loss", 1e-2);
}

// Mixture of experts on the device: 4 experts in blocks 1 and 3 (top-2, a capacity that drops
// choices, both router losses), as tests/mpi/moe_layouts_test.cpp trains them on the CPU. The loss
// and val_loss per step within 1e-4 of the CPU process's, and the routing figures of the last
// step's metrics line (router losses within 1e-4, the dropped fraction and the assignments per
// expert exactly: the same tokens went to the same experts), whether each rank holds every expert
// or its ep group splits them.
TEST_F(CudaLayouts, MixtureOfExpertsTrainsTheRunOfOneCpuProcess) {
  const std::string experts =
      " --set model.moe.experts=4 --set model.moe.top_k=2 --set model.moe.every=2"
      " --set model.moe.capacity_factor=1.0 --set model.moe.aux_loss=0.05"
      " --set model.moe.z_loss=0.01";
  const std::string cpu_run = train(*dir_, reference(), "moe_cpu", experts);
  ASSERT_EQ(metric(cpu_run, "loss").size(), 20u);
  EXPECT_GT(testing::logged(cpu_run, 20, "\"dropped_fraction\": "), 0.0)
      << "the capacity should drop some choices";
  auto ep = [](Layout layout, int size) {
    layout.ep = size;
    return layout;
  };
  const std::pair<Layout, std::string> runs[] = {
      {Layout{}, ""},
      {Layout{1, 2, 1, "1f1b", true}, ""},
      {Layout{1, 1, 2, "zb-h1", false, "full"}, ""},
      {Layout{2, 1, 1}, ""},
      {ep(Layout{2, 1, 1}, 2), ""},
      {ep(Layout{4, 1, 1}, 2), " --set parallel.zero.stage=2"},
      {ep(Layout{2, 2, 1, "1f1b", true}, 2), ""},
  };
  for (auto [layout, settings] : runs) {
    layout.device = "cuda";
    SCOPED_TRACE(layout.name() + settings);
    const std::string run =
        train(*dir_, layout, "moe_" + layout.name() + (settings.empty() ? "" : "_zero2"),
              experts + settings);
    expect_close(metric(run, "loss"), metric(cpu_run, "loss"), 0, "loss", 1e-4);
    expect_close(metric(run, "val_loss"), metric(cpu_run, "val_loss"), 0, "val_loss", 1e-4);
    EXPECT_FALSE(metric(run, "device_mib").empty()) << "the run did not train on the GPU";
    for (const std::string key :
         {"\"h.1\": {\"aux_loss\": ", "\"h.3\": {\"aux_loss\": ", "\"z_loss\": "}) {
      const double expected = testing::logged(cpu_run, 20, key);
      EXPECT_NEAR(testing::logged(run, 20, key), expected, 1e-4 * std::abs(expected)) << key;
    }
    for (const std::string key : {"\"dropped_fraction\": ", "\"tokens_per_expert\": ["})
      EXPECT_EQ(testing::logged(run, 20, key), testing::logged(cpu_run, 20, key)) << key;
  }
}

// DiLoCo on the device: the outer step reads and writes the master weights through the backend.
// 2 workers of (tp 2) on GPUs, and of (dp 2, ZeRO-3), train the run of 2 one-rank CPU workers.
TEST_F(CudaLayouts, DilocoWorkersTrainTheRunOfCpuWorkers) {
  const std::string settings =
      " --set diloco.enabled=true --set diloco.workers=2 --set diloco.inner_steps=4"
      " --set diloco.compression=int8 --set diloco.error_feedback=true";
  auto run_workers = [&](const Layout& layout, const std::string& name, const std::string& extra) {
    const std::string command = testing::mpirun(2 * layout.ranks()) + testing::bin("train") + " " +
                                dir_->str() + "/config.yaml" + layout.overrides() +
                                " --set run.name=" + name + settings + extra;
    const auto result = testing::run_command(command);
    EXPECT_EQ(result.status, 0) << command << "\n" << result.output;
    return dir_->str() + "/runs/" + name;
  };
  Layout cpu;
  cpu.device = "cpu";
  const auto reference = metric(run_workers(cpu, "diloco_cpu", ""), "loss");
  ASSERT_EQ(reference.size(), 20u);
  Layout tp{1, 2, 1};
  tp.device = "cuda";
  expect_close(metric(run_workers(tp, "diloco_cuda_tp2", ""), "loss"), reference, 0, "tp 2");
  Layout dp{2, 1, 1};
  dp.device = "cuda";
  expect_close(metric(run_workers(dp, "diloco_cuda_zero3", " --set parallel.zero.stage=3"), "loss"),
               reference, 0, "dp 2, ZeRO-3");
}

TEST_F(CudaLayouts, Bf16LayoutTrainsTheBf16RunOfOneProcess) {
  Layout single;
  single.device = "cuda";
  single.compute = "bf16";
  const std::string reference = train(*dir_, single, single.name());
  Layout layout{2, 2, 2, "1f1b", true};
  layout.device = "cuda";
  layout.compute = "bf16";
  const std::string run = train(*dir_, layout, layout.name());
  const auto bf16 = metric(reference, "loss");
  ASSERT_EQ(bf16.size(), 20u);
  // The bf16 bound of the kernel tests: the tensor-parallel sums round partial products to bf16
  // before adding them (in fp32), one process adds inside the GEMM.
  expect_close(metric(run, "loss"), bf16, 0, "bf16 loss", 1e-2);
  expect_close(metric(run, "val_loss"), metric(reference, "val_loss"), 0, "bf16 val_loss", 1e-2);
}

// FP8 (docs/ARCHITECTURE.md §6 "FP8"): the CUDA run of each recipe, on one GPU and on
// a layout of tp 2 with sequence parallelism and dp 2, trains the CPU emulation's run of one
// process within the bf16 bound (the operands are the same FP8 values; the GEMMs sum them in
// another order and the CUDA bf16 kernels round elsewhere than the CPU's emulation).
TEST_F(CudaLayouts, Fp8TrainsTheCpuEmulationsRun) {
  for (const std::string recipe : {"tensorwise", "rowwise", "delayed"}) {
    const std::string fp8 = " --set precision.fp8_min_size=0 --set precision.fp8=" + recipe;
    Layout cpu;
    cpu.device = "cpu";
    cpu.compute = "bf16";
    const auto reference = metric(train(*dir_, cpu, "fp8_cpu_" + recipe, fp8), "loss");
    ASSERT_EQ(reference.size(), 20u);
    Layout single;
    single.device = "cuda";
    single.compute = "bf16";
    Layout layout{2, 2, 1, "1f1b", true};
    layout.device = "cuda";
    layout.compute = "bf16";
    for (const Layout& l : {single, layout})
      expect_close(metric(train(*dir_, l, "fp8_" + recipe + l.name(), fp8), "loss"), reference, 0,
                   "FP8 " + recipe + " loss, " + l.name(), 1e-2);
  }
}

TEST_F(CudaLayouts, CheckpointsOfACudaLayoutResumeOnTheCpu) {
  namespace fs = std::filesystem;
  const auto reference = metric(reference_dir_, "loss");
  Layout written{2, 2, 2, "1f1b", true};
  written.device = "cuda";
  const std::string first = train(*dir_, written, "written", " --set train.stop_after=10");
  const std::string checkpoint = first + "/checkpoints/step_00000010.h5";
  ASSERT_TRUE(fs::exists(checkpoint));
  Layout resumed{1, 1, 2};
  resumed.device = "cpu";
  fs::create_directories(dir_->str() + "/runs/resumed");
  const std::string run = train(*dir_, resumed, "resumed", " --resume " + checkpoint);
  expect_close(metric(run, "loss"), reference, 10, "loss after resume", 1e-4);
}

// The optimizer on the host (optimizer.offload host or disk, ZeRO-Offload): each optimizer on a
// CUDA layout trains the run of one CPU process with that optimizer (the host's update is the CPU
// backend's code), alone, at dp 2 under ZeRO-1 and at tp 2; AdamW's state streamed from disk
// too; and a checkpoint of the offloaded CUDA run resumes on the CPU in place.
TEST_F(CudaLayouts, OffloadedOptimizersTrainTheRunOfOneCpuProcess) {
  namespace fs = std::filesystem;
  const std::string disk =
      " --set optimizer.offload=disk --set optimizer.offload_dir=" + dir_->str() +
      "/offload --set optimizer.offload_chunk=1024";
  for (const std::string name : {"adamw", "adafactor", "adamw8bit", "muon"}) {
    const std::string optimizer = " --set optimizer.name=" + name;
    const std::string cpu_run = train(*dir_, reference(), "offload_cpu_" + name, optimizer);
    ASSERT_EQ(metric(cpu_run, "loss").size(), 20u);
    const std::pair<Layout, std::string> runs[] = {
        {Layout{}, " --set optimizer.offload=host"},
        {Layout{2, 1, 1}, " --set optimizer.offload=host --set parallel.zero.stage=1"},
        {Layout{1, 2, 1}, " --set optimizer.offload=host"},
        {Layout{}, disk},
    };
    int index = 0;
    for (auto [layout, settings] : runs) {
      layout.device = "cuda";
      SCOPED_TRACE(name + " " + layout.name() + settings);
      const std::string run = train(
          *dir_, layout, "offload_" + name + "_" + std::to_string(index++), optimizer + settings);
      expect_close(metric(run, "loss"), metric(cpu_run, "loss"), 0, "loss", 1e-4);
      expect_close(metric(run, "val_loss"), metric(cpu_run, "val_loss"), 0, "val_loss", 1e-4);
      EXPECT_FALSE(metric(run, "device_mib").empty()) << "the run did not train on the GPU";
    }
  }
  Layout written;
  written.device = "cuda";
  const std::string first = train(*dir_, written, "offload_written",
                                  " --set optimizer.offload=host --set train.stop_after=10");
  const std::string checkpoint = first + "/checkpoints/step_00000010.h5";
  ASSERT_TRUE(fs::exists(checkpoint));
  fs::create_directories(dir_->str() + "/runs/offload_resumed");
  const std::string run = train(*dir_, reference(), "offload_resumed", " --resume " + checkpoint);
  expect_close(metric(run, "loss"), metric(reference_dir_, "loss"), 10, "loss after resume", 1e-4);
}

// parallel.device_comm on a machine with one GPU: NCCL runs over a group of one rank (every
// collective of the step goes through it: the gradient sums and the communicator set-up), auto
// stages through the host when ranks share the GPU, and nccl with ranks sharing it is a one-line
// error. (NCCL across ranks needs a GPU per rank: the tests here cannot cover it.)
TEST_F(CudaLayouts, DeviceCommChoosesWhatOneGpuCanCarry) {
  const auto reference = metric(reference_dir_, "loss");
  Layout single;
  single.device = "cuda";
  const std::string nccl_run =
      train(*dir_, single, "nccl_alone", " --set parallel.device_comm=nccl");
  expect_close(metric(nccl_run, "loss"), reference, 0, "loss over nccl", 1e-4);
  expect_close(metric(nccl_run, "val_loss"), metric(reference_dir_, "val_loss"), 0,
               "val_loss over nccl", 1e-4);

  // gpus_per_node 1 puts both ranks on GPU 0 however many the machine has.
  Layout shared{2, 1, 1};
  shared.device = "cuda";
  const std::string one_gpu = " --set parallel.gpus_per_node=1";
  const std::string auto_run =
      train(*dir_, shared, "auto_shared", one_gpu + " --set parallel.device_comm=auto");
  expect_close(metric(auto_run, "loss"), reference, 0, "loss staged by auto", 1e-4);

  const std::string command = testing::mpirun(2) + testing::bin("train") + " " + dir_->str() +
                              "/config.yaml" + shared.overrides() + one_gpu +
                              " --set parallel.device_comm=nccl --set run.name=nccl_shared";
  const auto result = testing::run_command(command);
  EXPECT_NE(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("error: parallel.device_comm nccl: world ranks 0 and 1 compute on "
                               "the same GPU"),
            std::string::npos)
      << result.output;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (strata::cuda_device_count() == 0) {
    std::printf("no usable CUDA device: skipped\n");
    return 77;
  }
  return RUN_ALL_TESTS();
}

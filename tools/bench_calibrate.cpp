// `bench calibrate`: this machine as a planner cluster description (plan/calibrate.h says what is
// measured and how):
//
//   mpirun -np N bench calibrate [--out FILE] [--name NAME] [--rows 2048 --width 256
//                                 --seq-len 256 --heads 4 --repeats 20]
//
// N ranks describe N devices on one node (the ranks a planned job will run here). Prints the
// rates as one JSON line, then the description (or writes it to --out, through a temporary file).
#include <cstdio>
#include <fstream>

#include "parallel/comm/mpi_communicator.h"
#include "plan/calibrate.h"
#include "tools/bench.h"
#include "train/metrics/metrics.h"

namespace strata::bench {

CommandSpec calibrate_command() {
  const CalibrationShape shape;
  return {
      "usage: mpirun -np N bench calibrate [--out FILE] [--name NAME] [--rows R] [--width C] "
      "[--seq-len T] [--heads H] [--repeats R]",
      "Measures this machine for the planner (plan/calibrate.h): N ranks describe N devices "
      "on one node. Prints the rates as one JSON line, then the cluster description (or "
      "writes it to --out).",
      {{"--out", "FILE", "", "write the description here (through a temporary file)", "print it"},
       {"--name", "NAME", "", "the cluster's name", "this host's name"},
       {"--rows", "R", std::to_string(shape.rows), "rows of the timed matmuls (batch · seq)"},
       {"--width", "C", std::to_string(shape.width), "model width of the timed layers"},
       {"--seq-len", "T", std::to_string(shape.seq_len), "sequence length of the attention"},
       {"--heads", "H", std::to_string(shape.heads), "attention heads"},
       {"--repeats", "R", std::to_string(shape.repeats), "timed repeats of each kernel"}}};
}

void bench_calibrate(int argc, char** argv, const ToolArgs& args) {
  MpiRuntime mpi(&argc, &argv);
  if (mpi.world_size() < 2)
    fail(
        "bench calibrate measures the links between ranks: run it under mpirun -np N (N >= 2, "
        "the ranks a job will run on this machine)");
  CalibrationShape shape;
  shape.rows = positive(args, "--rows");
  shape.width = positive(args, "--width");
  shape.seq_len = positive(args, "--seq-len");
  shape.heads = positive(args, "--heads");
  shape.repeats = positive(args, "--repeats");
  const ClusterSpec c = calibrate_this_machine(shape, mpi.ranks_on_host(), args.get("--name"));
  if (mpi.world_rank() != 0) return;
  const std::string text = "# Written by `mpirun -np " + std::to_string(mpi.world_size()) +
                           " bench calibrate` (plan/calibrate.h says what it measures).\n" +
                           cluster_to_yaml(c);
  const std::string out = args.get("--out");
  if (!out.empty()) {  // through a temporary file: an existing description stays whole
    const std::string temporary = out + ".tmp";
    {
      std::ofstream file(temporary);
      file << text;
      if (!file) fail("cannot write ", temporary);
    }
    if (std::rename(temporary.c_str(), out.c_str()) != 0) fail("cannot replace ", out);
  }
  std::printf("%s\n", JsonLine()
                          .add("bench", "calibrate")
                          .add("ranks", c.devices_per_node)
                          .add("cores", c.cores_per_node)
                          .add("matmul_gflops", c.device.matmul_tflops.fp32 * 1e3, "%.2f")
                          .add("attention_gflops", c.device.attention_tflops.fp32 * 1e3, "%.2f")
                          .add("elementwise_gbs", c.device.elementwise_gbs, "%.2f")
                          .add("latency_us", c.intra_node.latency_us, "%.2f")
                          .add("bandwidth_gbs", c.intra_node.bandwidth_gbs, "%.3f")
                          .str()
                          .c_str());
  if (out.empty()) std::printf("%s", text.c_str());
}

}  // namespace strata::bench

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

void bench_calibrate(int argc, char** argv, const ToolArgs& args) {
  MpiRuntime mpi(&argc, &argv);
  if (mpi.world_size() < 2)
    fail(
        "bench calibrate measures the links between ranks: run it under mpirun -np N (N >= 2, "
        "the ranks a job will run on this machine)");
  CalibrationShape shape;
  shape.rows = positive(args, "--rows", shape.rows);
  shape.width = positive(args, "--width", shape.width);
  shape.seq_len = positive(args, "--seq-len", shape.seq_len);
  shape.heads = positive(args, "--heads", shape.heads);
  shape.repeats = positive(args, "--repeats", shape.repeats);
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

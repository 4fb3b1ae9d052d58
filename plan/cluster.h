// Cluster descriptions for the planner (configs/clusters/*.yaml): what a layout runs on.
//
//   name: h100-sxm-ib400
//   backend: cuda                  # cuda | cpu: which of Strata's backends the ranks run
//   nodes: 16                      # how many nodes the cluster has
//   devices_per_node: 8            # ranks per node
//   cores_per_node: 2              # cpu only, optional: the cores a node's ranks share
//   waiting_share: 0.1             # cpu only, optional: the share of a core a rank blocked in MPI
//                                  # still takes from the others (it polls); default 0
//   busy_latency_us: 800           # cpu only, optional: a point-to-point message's latency while
//                                  # the other ranks compute (its peer waits for a core); default 0
//   offload_gbs: 2                 # optional: a rank's disk rate for optimizer.offload disk
//   host_link_gbs: 20              # cuda only, optional: a rank's device-host copy rate, and
//   host_update_gbs: 30            # its host update's memory rate (optimizer.offload host, disk)
//   device:
//     name: NVIDIA H100 SXM5 80GB
//     memory_gib: 80               # usable by one rank
//     peak_tflops: {fp32: 67, bf16: 989, fp16: 989}   # dense, per device (MFU's denominator)
//     memory_bandwidth_gbs: 3350
//     sustained:                   # what kernels reach (per core on a cpu cluster)
//       matmul_tflops: {fp32: 50, bf16: 700, fp16: 700}     # GEMMs of model shapes
//       attention_tflops: {fp32: 20, bf16: 350, fp16: 350}  # 4·B·T²·C per layer forward
//       elementwise_gbs: 2800      # layernorm, GELU, residuals, loss: bytes read + written
//       op_overhead_us: 4          # per kernel (launch); 0 on a cpu
//       weight_operand_gbs: 3350   # optional: a GEMM call's fixed cost, its weight operand's
//                                  # bytes at this rate, whatever the rows (a GPU reads it from
//                                  # memory, OpenBLAS packs it); default memory_bandwidth_gbs
//   links:                         # per device, one direction; latency per message
//     intra_node:   {bandwidth_gbs: 450, latency_us: 2}
//     inter_node:   {bandwidth_gbs: 50, latency_us: 5}
//     inter_worker: {bandwidth_gbs: 0.125, latency_us: 50000}   # optional: DiLoCo's slow link
//
// Every key but links.inter_worker is required; unknown keys are errors, as in run configs.
// Figures are sustained-rate inputs of an α–β model (time = latency + bytes / bandwidth), so a file
// says in comments where each figure comes from (a datasheet, a paper, `bench calibrate`).
#pragma once

#include <optional>
#include <string>

#include "model/core/choice.h"
#include "model/kernels/cpu/precision.h"

namespace strata {

struct LinkSpec {
  double bandwidth_gbs = 0;  // GB/s (10^9 bytes), one direction, per device
  double latency_us = 0;     // per message

  double seconds(double bytes, int messages = 1) const {
    return messages * latency_us * 1e-6 + bytes / (bandwidth_gbs * 1e9);
  }
  bool operator==(const LinkSpec&) const = default;
};

// Which of Strata's backends a cluster's ranks run (its file's `backend`).
enum class ClusterBackend { cuda, cpu };
inline constexpr Choices kClusterBackendChoices{
    std::array{ChoiceWord{ClusterBackend::cuda, "cuda"}, ChoiceWord{ClusterBackend::cpu, "cpu"}}};

// TFLOP/s per precision.compute word.
struct PrecisionRates {
  double fp32 = 0, bf16 = 0, fp16 = 0;

  // The rate for `compute`.
  double of(cpu::ComputeDtype compute) const;
  bool operator==(const PrecisionRates&) const = default;
};

struct DeviceSpec {
  std::string name;
  double memory_gib = 0;
  PrecisionRates peak_tflops;
  double memory_bandwidth_gbs = 0;
  // Sustained rates, the compute model's inputs (plan/step_time.h).
  PrecisionRates matmul_tflops;
  PrecisionRates attention_tflops;
  double elementwise_gbs = 0;
  double op_overhead_us = 0;
  double weight_operand_gbs = 0;  // as given; 0 when the file leaves it out

  // A GEMM call's weight bytes per second: weight_operand_gbs, or the memory bandwidth if unset.
  double weight_rate_gbs() const {
    return weight_operand_gbs > 0 ? weight_operand_gbs : memory_bandwidth_gbs;
  }
  bool operator==(const DeviceSpec&) const = default;
};

// The disk rate the step-time model assumes when a cluster gives no offload_gbs: one NVMe
// drive's sequential rate.
inline constexpr double kOffloadGbs = 2.0;
// What a cuda cluster's rank gets for an update offloaded to the host (optimizer.offload host or
// disk) when its file gives no host_link_gbs or host_update_gbs: a share of one PCIe 5 x16
// link per direction (about 55 GB/s peak, shared by the GPUs on a switch), and a share of a
// host's memory bandwidth (a socket's ~300 GB/s over 8 GPUs' updates).
inline constexpr double kHostLinkGbs = 20.0;
inline constexpr double kHostUpdateGbs = 30.0;

struct ClusterSpec {
  std::string name;
  ClusterBackend backend = ClusterBackend::cuda;
  int nodes = 1;
  int devices_per_node = 1;
  int cores_per_node = 0;      // cpu: the cores its ranks share (0: one each)
  double waiting_share = 0;    // cpu: a core's share a rank waiting in MPI takes (0 to 1)
  double busy_latency_us = 0;  // cpu: a message's latency while the other ranks compute
  // GB/s each rank streams an offloaded optimizer state at (optimizer.offload disk: the local
  // disk's share of one rank), read and written; 0: not given (the model assumes kOffloadGbs).
  double offload_gbs = 0;
  // cuda: a rank's copy rate between device and host (one direction), and the bytes per second
  // its update reads and writes on the host, for optimizer.offload host or disk; 0: not given
  // (kHostLinkGbs, kHostUpdateGbs).
  double host_link_gbs = 0;
  double host_update_gbs = 0;
  DeviceSpec device;
  LinkSpec intra_node;
  LinkSpec inter_node;
  std::optional<LinkSpec> inter_worker;

  int devices() const { return nodes * devices_per_node; }
  bool operator==(const ClusterSpec&) const = default;
};

// strata::Error naming `source_name` and the key for a missing, unknown or invalid entry.
ClusterSpec parse_cluster(const std::string& yaml_text, const std::string& source_name);
ClusterSpec load_cluster(const std::string& path);
// The description as YAML that parse_cluster reads back equal (what `bench calibrate` writes).
std::string cluster_to_yaml(const ClusterSpec& cluster);

}  // namespace strata

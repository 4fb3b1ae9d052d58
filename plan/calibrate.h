// Measuring this machine as a planner cluster (plan/cluster.h), for `bench calibrate` and for
// `train`'s parallel.auto when no cluster file is given:
//   compute, per core: rank 0 alone (the others sleep), one thread, times the CPU kernels Gpt
//     runs on a layer's shapes (rows = micro-batch · sequence, width C): the GEMMs (C → 3C, C → C,
//     C → 4C, 4C → C) forward and backward at the rows and at an eighth of them, which separates
//     their rate per FLOP from a cost per call that the rows do not shrink (OpenBLAS packs the
//     weight operand: weight_operand_gbs), causal attention (4·B·T²·C FLOPs as the model counts
//     them), and LayerNorm and GELU (elementwise bytes: each element read and written once). The
//     CPU backend computes bf16/fp16 in fp32 storage, so every precision gets the fp32 rates, and
//     the peak is the GEMM rate (a CPU has no datasheet peak for these kernels).
//   links: every rank at once, paired (0-1, 2-3, ...; an odd last rank idles), ping-pongs 8-byte
//     and 4 MiB messages; latency = half the small round trip, bandwidth = 4 MiB over (half the
//     large round trip − latency). All ranks run, as in a job, so the figures include their
//     sharing the cores. The nodes a config simulates (parallel.gpus_per_node) are on this one
//     machine: inter_node gets the same figures.
//   waiting: when the ranks outnumber the cores, as many ranks as cores time the GEMMs again while
//     the others wait in a blocking receive; the slowdown gives the share of a core a waiting
//     rank takes (MPI polls while it waits): the cluster's waiting_share. And ranks 0 and 1
//     ping-pong, computing between messages, while the others compute: the latency of a message
//     whose peer must first get a core back (busy_latency_us; pipeline messages on a shared
//     machine pay it).
//   memory: this machine's RAM shared by the ranks; cores: the union of the ranks' affinity masks
//     (bound one per core or not, the ranks share the same cores).
// The world's ranks are the cluster's devices (one node). Collective over MPI_COMM_WORLD; the
// result is rank 0's measurement, broadcast, so every rank returns the same description.
#pragma once

#include <string>

#include "plan/cluster.h"

namespace strata {

struct CalibrationShape {
  int rows = 2048;  // micro-batch · sequence
  int width = 256;
  int seq_len = 256;
  int heads = 4;
  int repeats = 20;
};

// `ranks_on_host`: MpiRuntime::ranks_on_host(); threads are set to one per rank meanwhile.
ClusterSpec calibrate_this_machine(const CalibrationShape& shape, int ranks_on_host,
                                   const std::string& name = "");

}  // namespace strata

// Inputs of the planner's unit tests: a made-up GPU cluster and a small GPT config.
#pragma once

#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/config.h"

namespace strata::testing {

// Four nodes of two devices with `memory_gib` each: peak 100 TFLOP/s, GEMMs 50, attention 20,
// elementwise 1000 GB/s; links 100 GB/s and 2 us inside a node, `inter_node_gbs` and 5 us between.
inline ClusterSpec test_cluster(double memory_gib = 80, double inter_node_gbs = 10) {
  ClusterSpec c;
  c.name = "test";
  c.nodes = 4;
  c.devices_per_node = 2;
  c.device.memory_gib = memory_gib;
  c.device.peak_tflops = {100, 100, 100};
  c.device.matmul_tflops = {50, 50, 50};
  c.device.attention_tflops = {20, 20, 20};
  c.device.elementwise_gbs = 1000;
  c.device.memory_bandwidth_gbs = 1000;
  c.intra_node = {100, 2};
  c.inter_node = {inter_node_gbs, 5};
  return c;
}

// 8 layers, 8 heads, width 512, sequence 256, vocabulary 8192, global batch 32 in micro-batches
// of 4; then `overrides` (key.path=value).
inline Config planner_config(const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> all = {
      "model.n_layer=8",       "model.n_head=8",        "model.d_model=512",   "model.seq_len=256",
      "model.vocab_size=8192", "train.global_batch=32", "train.micro_batch=4", "data.train=unused"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return parse_config("", "test", all);
}

}  // namespace strata::testing

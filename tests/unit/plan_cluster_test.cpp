// Cluster descriptions (plan/cluster.h): the shipped files parse, a description round-trips
// through its YAML, and a bad file is an error naming the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "model/core/error.h"
#include "plan/cluster.h"
#include "tests/support/test_paths.h"

namespace strata {
namespace {

std::string error_of(const std::string& yaml) {
  try {
    parse_cluster(yaml, "c.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const std::string kValid = R"(
name: test
backend: cuda
nodes: 2
devices_per_node: 4
device:
  name: gpu
  memory_gib: 40
  peak_tflops: {fp32: 10, bf16: 100, fp16: 90}
  memory_bandwidth_gbs: 1000
  sustained:
    matmul_tflops: {fp32: 8, bf16: 70, fp16: 60}
    attention_tflops: {fp32: 4, bf16: 30, fp16: 30}
    elementwise_gbs: 800
    op_overhead_us: 0
links:
  intra_node: {bandwidth_gbs: 200, latency_us: 2}
  inter_node: {bandwidth_gbs: 20, latency_us: 6}
)";

// kValid as a cpu cluster.
std::string cpu_cluster() {
  std::string cpu = kValid;
  cpu.replace(cpu.find("backend: cuda"), 13, "backend: cpu");
  return cpu;
}

TEST(ClusterSpec, ParsesEveryField) {
  const ClusterSpec c = parse_cluster(kValid, "c.yaml");
  EXPECT_EQ(c.name, "test");
  EXPECT_EQ(c.devices(), 8);
  EXPECT_EQ(c.backend, ClusterBackend::cuda);
  EXPECT_EQ(c.device.peak_tflops.of(cpu::ComputeDtype::bf16), 100);
  EXPECT_EQ(c.device.peak_tflops.of(cpu::ComputeDtype::fp16), 90);
  EXPECT_EQ(c.device.peak_tflops.of(cpu::ComputeDtype::fp32), 10);
  EXPECT_EQ(c.device.matmul_tflops.of(cpu::ComputeDtype::fp16), 60);
  EXPECT_EQ(c.device.attention_tflops.of(cpu::ComputeDtype::bf16), 30);
  EXPECT_EQ(c.device.elementwise_gbs, 800);
  EXPECT_EQ(c.device.op_overhead_us, 0);
  EXPECT_EQ(c.device.weight_operand_gbs, 0);    // absent ...
  EXPECT_EQ(c.device.weight_rate_gbs(), 1000);  // ... so the memory bandwidth
  EXPECT_EQ(c.cores_per_node, 0);
  EXPECT_EQ(c.inter_node.latency_us, 6);
  EXPECT_FALSE(c.inter_worker.has_value());
  // 1 MB over 20 GB/s after 6 us.
  EXPECT_DOUBLE_EQ(c.inter_node.seconds(1e6), 6e-6 + 1e6 / 20e9);
}

TEST(ClusterSpec, WeightOperandRateIsOptional) {
  std::string yaml = kValid;
  yaml.replace(yaml.find("op_overhead_us: 0"), 17, "op_overhead_us: 0\n    weight_operand_gbs: 25");
  const ClusterSpec c = parse_cluster(yaml, "c.yaml");
  EXPECT_EQ(c.device.weight_rate_gbs(), 25);
  EXPECT_EQ(parse_cluster(cluster_to_yaml(c), "round trip"), c);
}

// The offloaded update's rates (optimizer.offload on a cuda cluster) are optional, cuda only.
TEST(ClusterSpec, HostRatesAreOptionalAndCudaOnly) {
  const ClusterSpec c = parse_cluster(kValid + "host_link_gbs: 12\nhost_update_gbs: 40\n", "c");
  EXPECT_EQ(c.host_link_gbs, 12);
  EXPECT_EQ(c.host_update_gbs, 40);
  EXPECT_EQ(parse_cluster(cluster_to_yaml(c), "round trip"), c);
  EXPECT_EQ(parse_cluster(kValid, "c").host_link_gbs, 0);  // absent: kHostLinkGbs
  const std::string cpu = cpu_cluster();
  EXPECT_EQ(error_of(cpu + "host_update_gbs: 40\n"),
            "c.yaml: 'host_update_gbs' is for a cuda cluster (backend: cuda)");
  EXPECT_EQ(error_of(kValid + "host_link_gbs: 0\n"),
            "c.yaml: 'host_link_gbs' must be positive, got 0");
}

TEST(ClusterSpec, ShippedFilesParseAndRoundTrip) {
  int files = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(testing::source_dir() + "/configs/clusters")) {
    const ClusterSpec c = load_cluster(entry.path().string());
    EXPECT_EQ(parse_cluster(cluster_to_yaml(c), "round trip"), c) << entry.path();
    ++files;
  }
  EXPECT_GE(files, 3);
}

TEST(ClusterSpec, BadFilesNameTheKey) {
  EXPECT_EQ(error_of("name: x\n"), "c.yaml: missing key 'backend'");
  EXPECT_EQ(error_of("name: x\nbackend: tpu\n"),
            "c.yaml: 'backend' must be cuda or cpu, got 'tpu'");
  std::string yaml = kValid;
  yaml.replace(yaml.find("latency_us: 6"), 13, "latency_us: -1");
  EXPECT_EQ(error_of(yaml), "c.yaml: 'links.inter_node.latency_us' must be positive, got -1");
  yaml = kValid + "colour: blue\n";
  EXPECT_EQ(error_of(yaml), "c.yaml: unknown key 'colour'");
  yaml = kValid;
  yaml.replace(yaml.find("fp16: 90"), 8, "fp8: 90");
  EXPECT_EQ(error_of(yaml), "c.yaml: missing key 'device.peak_tflops.fp16'");
  yaml = kValid;
  yaml.replace(yaml.find("nodes: 2"), 8, "nodes: 2.5");
  EXPECT_EQ(error_of(yaml), "c.yaml: 'nodes' must be a whole number");
  yaml = kValid + "cores_per_node: 4\n";
  EXPECT_EQ(error_of(yaml), "c.yaml: 'cores_per_node' is for a cpu cluster (backend: cpu)");
  yaml = kValid;
  yaml.replace(yaml.find("op_overhead_us: 0"), 17, "op_overhead_us: -2");
  EXPECT_EQ(error_of(yaml),
            "c.yaml: 'device.sustained.op_overhead_us' must be zero or positive, got -2");
  yaml = kValid;
  yaml.replace(yaml.find("    elementwise_gbs: 800\n"), 25, "");
  EXPECT_EQ(error_of(yaml), "c.yaml: missing key 'device.sustained.elementwise_gbs'");
  yaml = kValid + "waiting_share: 0.1\n";
  EXPECT_EQ(error_of(yaml), "c.yaml: 'waiting_share' needs 'cores_per_node' (ranks sharing cores)");
  const std::string cpu = cpu_cluster();
  EXPECT_EQ(error_of(cpu + "cores_per_node: 2\nwaiting_share: 1.5\n"),
            "c.yaml: 'waiting_share' must be at most 1");
  EXPECT_EQ(error_of(cpu + "cores_per_node: 2\nbusy_latency_us: -1\n"),
            "c.yaml: 'busy_latency_us' must be zero or positive, got -1");
  const ClusterSpec shared =
      parse_cluster(cpu + "cores_per_node: 2\nwaiting_share: 0.25\nbusy_latency_us: 800\n", "c");
  EXPECT_EQ(shared.waiting_share, 0.25);
  EXPECT_EQ(shared.busy_latency_us, 800);
  EXPECT_EQ(parse_cluster(cluster_to_yaml(shared), "round trip"), shared);
  EXPECT_NE(error_of("[").find("c.yaml: invalid YAML"), std::string::npos);
}

}  // namespace
}  // namespace strata

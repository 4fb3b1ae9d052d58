#include "plan/cluster.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <iomanip>
#include <set>
#include <sstream>
#include <utility>

#include "data/documents.h"
#include "model/core/error.h"

namespace strata {
namespace {

// Reads one map of the file, remembering which keys were read so that the rest are refused.
class Section {
 public:
  Section(const YAML::Node& node, std::string path, const std::string& source)
      : node_(node), path_(std::move(path)), source_(source) {
    if (!node_.IsMap()) fail(source_, ": '", where(""), "' must be a map of keys");
  }

  const YAML::Node child(const std::string& key, bool required = true) {
    read_.insert(key);
    const YAML::Node& map = node_;  // const: a lookup never adds the key
    const YAML::Node value = map[key];
    if (required && (!value || value.IsNull())) fail(source_, ": missing key '", where(key), "'");
    return value;
  }
  double positive(const std::string& key) {
    const YAML::Node value = child(key);
    double number = 0;
    try {
      number = value.as<double>();
    } catch (const YAML::Exception&) {
      fail(source_, ": '", where(key), "' must be a number");
    }
    if (!(number > 0) || !std::isfinite(number))
      fail(source_, ": '", where(key), "' must be positive, got ", value.Scalar());
    return number;
  }
  double non_negative(const std::string& key) {
    const YAML::Node value = child(key);
    double number = -1;
    try {
      number = value.as<double>();
    } catch (const YAML::Exception&) {
      fail(source_, ": '", where(key), "' must be a number");
    }
    if (!(number >= 0) || !std::isfinite(number))
      fail(source_, ": '", where(key), "' must be zero or positive, got ", value.Scalar());
    return number;
  }
  int count(const std::string& key) {
    const double number = positive(key);
    if (number != std::floor(number) || number > 1e7)
      fail(source_, ": '", where(key), "' must be a whole number");
    return static_cast<int>(number);
  }
  std::string text(const std::string& key) {
    const YAML::Node value = child(key);
    if (!value.IsScalar()) fail(source_, ": '", where(key), "' must be a string");
    return value.Scalar();
  }
  Section section(const std::string& key) { return Section(child(key), where(key), source_); }
  // Refuses keys that were never read.
  void finish() const {
    for (const auto& entry : node_) {
      const std::string key = entry.first.Scalar();
      if (!read_.count(key)) fail(source_, ": unknown key '", where(key), "'");
    }
  }
  std::string where(const std::string& key) const {
    return path_.empty() ? key : key.empty() ? path_ : path_ + "." + key;
  }

 private:
  YAML::Node node_;
  std::string path_;
  const std::string& source_;
  std::set<std::string> read_;
};

LinkSpec read_link(Section& links, const std::string& key) {
  Section link = links.section(key);
  LinkSpec spec;
  spec.bandwidth_gbs = link.positive("bandwidth_gbs");
  spec.latency_us = link.positive("latency_us");
  link.finish();
  return spec;
}

PrecisionRates read_rates(Section& parent, const std::string& key) {
  Section rates = parent.section(key);
  PrecisionRates r;
  r.fp32 = rates.positive("fp32");
  r.bf16 = rates.positive("bf16");
  r.fp16 = rates.positive("fp16");
  rates.finish();
  return r;
}

}  // namespace

double PrecisionRates::of(cpu::ComputeDtype compute) const {
  switch (compute) {
    case cpu::ComputeDtype::bf16:
      return bf16;
    case cpu::ComputeDtype::fp16:
      return fp16;
    case cpu::ComputeDtype::fp32:
      break;
  }
  return fp32;
}

ClusterSpec parse_cluster(const std::string& yaml_text, const std::string& source_name) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    fail(source_name, ": invalid YAML: ", e.msg);
  }
  Section top(root, "", source_name);
  ClusterSpec cluster;
  cluster.name = top.text("name");
  const std::string backend = top.text("backend");
  const auto known = kClusterBackendChoices.find(backend);
  if (!known)
    fail(source_name, ": 'backend' must be ", kClusterBackendChoices.list(), ", got '", backend,
         "'");
  cluster.backend = *known;
  cluster.nodes = top.count("nodes");
  cluster.devices_per_node = top.count("devices_per_node");
  if (top.child("cores_per_node", false)) {
    if (cluster.backend != ClusterBackend::cpu)
      fail(source_name, ": 'cores_per_node' is for a cpu cluster (backend: cpu)");
    cluster.cores_per_node = top.count("cores_per_node");
  }
  if (top.child("waiting_share", false)) {
    if (cluster.cores_per_node == 0)
      fail(source_name, ": 'waiting_share' needs 'cores_per_node' (ranks sharing cores)");
    cluster.waiting_share = top.non_negative("waiting_share");
    if (cluster.waiting_share > 1) fail(source_name, ": 'waiting_share' must be at most 1");
  }
  if (top.child("busy_latency_us", false)) {
    if (cluster.cores_per_node == 0)
      fail(source_name, ": 'busy_latency_us' needs 'cores_per_node' (ranks sharing cores)");
    cluster.busy_latency_us = top.non_negative("busy_latency_us");
  }
  if (top.child("offload_gbs", false)) cluster.offload_gbs = top.positive("offload_gbs");
  for (auto [key, value] : {std::pair{"host_link_gbs", &cluster.host_link_gbs},
                            std::pair{"host_update_gbs", &cluster.host_update_gbs}}) {
    if (!top.child(key, false)) continue;
    if (cluster.backend != ClusterBackend::cuda)
      fail(source_name, ": '", key, "' is for a cuda cluster (backend: cuda)");
    *value = top.positive(key);
  }
  Section device = top.section("device");
  DeviceSpec& d = cluster.device;
  d.name = device.text("name");
  d.memory_gib = device.positive("memory_gib");
  d.peak_tflops = read_rates(device, "peak_tflops");
  d.memory_bandwidth_gbs = device.positive("memory_bandwidth_gbs");
  Section sustained = device.section("sustained");
  d.matmul_tflops = read_rates(sustained, "matmul_tflops");
  d.attention_tflops = read_rates(sustained, "attention_tflops");
  d.elementwise_gbs = sustained.positive("elementwise_gbs");
  d.op_overhead_us = sustained.non_negative("op_overhead_us");
  if (sustained.child("weight_operand_gbs", false))
    d.weight_operand_gbs = sustained.positive("weight_operand_gbs");
  sustained.finish();
  device.finish();
  Section links = top.section("links");
  cluster.intra_node = read_link(links, "intra_node");
  cluster.inter_node = read_link(links, "inter_node");
  if (links.child("inter_worker", false)) cluster.inter_worker = read_link(links, "inter_worker");
  links.finish();
  top.finish();
  return cluster;
}

ClusterSpec load_cluster(const std::string& path) {
  return parse_cluster(read_file_bytes(path), path);
}

std::string cluster_to_yaml(const ClusterSpec& c) {
  std::ostringstream out;
  out << std::setprecision(17);
  const auto link = [&](const char* key, const LinkSpec& l) {
    out << "  " << key << ": {bandwidth_gbs: " << l.bandwidth_gbs
        << ", latency_us: " << l.latency_us << "}\n";
  };
  const auto rates = [](const PrecisionRates& r) {
    std::ostringstream text;
    text << std::setprecision(17) << "{fp32: " << r.fp32 << ", bf16: " << r.bf16
         << ", fp16: " << r.fp16 << "}";
    return text.str();
  };
  const DeviceSpec& d = c.device;
  out << "name: " << YAML::Node(c.name) << "\n"
      << "backend: " << kClusterBackendChoices.word(c.backend) << "\n"
      << "nodes: " << c.nodes << "\n"
      << "devices_per_node: " << c.devices_per_node << "\n";
  if (c.cores_per_node > 0) out << "cores_per_node: " << c.cores_per_node << "\n";
  if (c.waiting_share > 0) out << "waiting_share: " << c.waiting_share << "\n";
  if (c.busy_latency_us > 0) out << "busy_latency_us: " << c.busy_latency_us << "\n";
  if (c.offload_gbs > 0) out << "offload_gbs: " << c.offload_gbs << "\n";
  if (c.host_link_gbs > 0) out << "host_link_gbs: " << c.host_link_gbs << "\n";
  if (c.host_update_gbs > 0) out << "host_update_gbs: " << c.host_update_gbs << "\n";
  out << "device:\n"
      << "  name: " << YAML::Node(d.name) << "\n"
      << "  memory_gib: " << d.memory_gib << "\n"
      << "  peak_tflops: " << rates(d.peak_tflops) << "\n"
      << "  memory_bandwidth_gbs: " << d.memory_bandwidth_gbs << "\n"
      << "  sustained:\n"
      << "    matmul_tflops: " << rates(d.matmul_tflops) << "\n"
      << "    attention_tflops: " << rates(d.attention_tflops) << "\n"
      << "    elementwise_gbs: " << d.elementwise_gbs << "\n"
      << "    op_overhead_us: " << d.op_overhead_us << "\n";
  if (d.weight_operand_gbs > 0) out << "    weight_operand_gbs: " << d.weight_operand_gbs << "\n";
  out << "links:\n";
  link("intra_node", c.intra_node);
  link("inter_node", c.inter_node);
  if (c.inter_worker) link("inter_worker", *c.inter_worker);
  return out.str();
}

}  // namespace strata

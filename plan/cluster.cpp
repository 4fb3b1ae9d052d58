#include "plan/cluster.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <iomanip>
#include <set>
#include <sstream>

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

}  // namespace

double DeviceSpec::peak_tflops(const std::string& compute) const {
  if (compute == "bf16") return peak_tflops_bf16;
  if (compute == "fp16") return peak_tflops_fp16;
  return peak_tflops_fp32;
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
  cluster.nodes = top.count("nodes");
  cluster.devices_per_node = top.count("devices_per_node");
  Section device = top.section("device");
  cluster.device.name = device.text("name");
  cluster.device.memory_gib = device.positive("memory_gib");
  Section peaks = device.section("peak_tflops");
  cluster.device.peak_tflops_fp32 = peaks.positive("fp32");
  cluster.device.peak_tflops_bf16 = peaks.positive("bf16");
  cluster.device.peak_tflops_fp16 = peaks.positive("fp16");
  peaks.finish();
  cluster.device.memory_bandwidth_gbs = device.positive("memory_bandwidth_gbs");
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
  out << "name: " << YAML::Node(c.name) << "\n"
      << "nodes: " << c.nodes << "\n"
      << "devices_per_node: " << c.devices_per_node << "\n"
      << "device:\n"
      << "  name: " << YAML::Node(c.device.name) << "\n"
      << "  memory_gib: " << c.device.memory_gib << "\n"
      << "  peak_tflops: {fp32: " << c.device.peak_tflops_fp32
      << ", bf16: " << c.device.peak_tflops_bf16 << ", fp16: " << c.device.peak_tflops_fp16 << "}\n"
      << "  memory_bandwidth_gbs: " << c.device.memory_bandwidth_gbs << "\n"
      << "links:\n";
  link("intra_node", c.intra_node);
  link("inter_node", c.inter_node);
  if (c.inter_worker) link("inter_worker", *c.inter_worker);
  return out.str();
}

}  // namespace strata

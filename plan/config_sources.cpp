// `data.train` in its two forms: a string (one split of token shards) or a weighted list of
// sources (a mixture, data/mixture.h). Reading, writing, the resume warnings' text and the
// mixture's rules; config.cpp and config_validate.cpp call these for the one key.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <set>
#include <sstream>

#include "data/mixture.h"
#include "model/core/error.h"
#include "plan/config.h"
#include "plan/config_fields.h"

namespace strata {
namespace {

bool is_name_character(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// Names are keys of metrics lines and TensorBoard tags: short, and nothing to escape.
constexpr std::size_t kMaxNameLength = 64;

std::string shortest_text(double value) {
  char text[32];  // the shortest text that parses back to the same double
  const auto result = std::to_chars(text, text + sizeof text, value);
  return std::string(text, result.ptr);
}

}  // namespace

std::string source_name_of(const std::string& path) {
  std::vector<std::string> components;
  std::stringstream parts(path);
  for (std::string part; std::getline(parts, part, '/');) components.push_back(part);
  for (auto it = components.rbegin(); it != components.rend(); ++it) {
    std::string part = *it;
    if (part.empty() || part == "." || part == ".." ||
        part.find_first_of("*?[") != std::string::npos)
      continue;
    if (part.ends_with(".h5")) part.resize(part.size() - 3);
    if (part.empty() || part == "train") continue;  // tokenize's layout: <corpus>/train
    for (char& c : part)
      if (!is_name_character(c)) c = '_';
    return part.substr(0, kMaxNameLength);
  }
  return "";
}

std::vector<DataSource> DataConfig::train_sources() const {
  if (!mixture.empty()) return mixture;
  const std::string name = source_name_of(train);
  return {DataSource{train, 1.0, "", name.empty() ? "train" : name}};
}

namespace config_detail {
namespace {

const std::vector<std::string>& source_keys() {
  static const std::vector<std::string> keys{"path", "weight", "val", "name"};
  return keys;
}

// Entry `index` of the list, at `key` (data.train[i]).
DataSource read_source(const YAML::Node& item, const std::string& key, std::size_t index,
                       const ConfigSource& source) {
  if (!item.IsMap())
    source.fail_key(key, "must be a map {path: SHARDS, weight: W} (val and name optional), got ",
                    describe(item));
  std::set<std::string> seen;
  for (const auto& entry : item) {
    if (!entry.first.IsScalar())
      source.fail_key(key, "has a key that is not a name: ", describe(entry.first));
    const std::string name = entry.first.Scalar(), child = key + "." + name;
    if (!seen.insert(name).second) fail(source.name(), ": duplicate key '", child, "'");
    if (std::ranges::find(source_keys(), name) == source_keys().end()) {
      const std::string word = closest_word(name, source_keys());
      fail(source.name(), ": unknown key '", child, "'",
           word.empty() ? " (a source has path, weight, val and name)"
                        : " (did you mean '" + key + "." + word + "'?)",
           source.origin(child));
    }
  }
  // A key's text: std::nullopt when absent, "" when null.
  const auto text = [&](const char* name) -> std::optional<std::string> {
    const YAML::Node value = item[name];
    if (!value) return std::nullopt;
    if (value.IsNull()) return std::string();
    if (!value.IsScalar())
      source.fail_key(key + "." + name, "must be a string, got ", describe(value));
    return value.Scalar();
  };
  DataSource result;
  const auto path = text("path");
  if (!path || path->empty())
    source.fail_key(key + ".path", path ? "must not be empty" : "is missing",
                    ": every source names its training shards (a file, directory or glob)");
  result.path = *path;
  // A source without a weight draws as much as one of weight 1 (ARCHITECTURE §3).
  if (const auto weight = text("weight")) {
    const auto number = parse_number(*weight);
    if (!number) source.fail_key(key + ".weight", "must be a number, got '", *weight, "'");
    result.weight = *number;
  }
  result.val = text("val").value_or("");
  result.name = text("name").value_or("");
  if (result.name.empty()) result.name = source_name_of(result.path);
  if (result.name.empty()) result.name = "source" + std::to_string(index);
  return result;
}

}  // namespace

void read_train_data(const YAML::Node& node, const std::string& path, TrainData data,
                     const ConfigSource& source) {
  data.path.clear();
  data.mixture.clear();
  if (node.IsNull()) return;  // validation says what is missing
  if (node.IsScalar()) {
    data.path = node.Scalar();
    return;
  }
  if (!node.IsSequence())
    source.fail_key(path,
                    "must be a string (a file, directory or glob of token shards) or a list of "
                    "sources {path, weight, val, name}, got ",
                    describe(node));
  if (node.size() == 0)
    source.fail_key(path, "is an empty list: a mixture needs at least one source {path, weight}");
  for (std::size_t i = 0; i < node.size(); ++i)
    data.mixture.push_back(read_source(node[i], path + "[" + std::to_string(i) + "]", i, source));
}

void write_train_data(YAML::Emitter& out, const TrainData& data) {
  if (data.mixture.empty()) {
    emit_string(out, data.path);
    return;
  }
  out << YAML::BeginSeq;
  for (const DataSource& s : data.mixture) {
    out << YAML::BeginMap << YAML::Key << "path" << YAML::Value;
    emit_string(out, s.path);
    out << YAML::Key << "weight" << YAML::Value << shortest_text(s.weight);
    if (!s.val.empty()) {
      out << YAML::Key << "val" << YAML::Value;
      emit_string(out, s.val);
    }
    out << YAML::Key << "name" << YAML::Value << s.name << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

std::string train_data_text(const TrainData& data) {
  if (data.mixture.empty()) return data.path;
  std::string text = "[";
  for (const DataSource& s : data.mixture) {
    text += (text.size() > 1 ? ", " : "") + std::string("{path: ") + s.path +
            ", weight: " + shortest_text(s.weight);
    if (!s.val.empty()) text += ", val: " + s.val;
    text += ", name: " + s.name + "}";
  }
  return text + "]";
}

void validate_mixture(const std::vector<DataSource>& mixture, const ConfigSource& source) {
  const auto key = [](std::size_t i, const char* field) {
    return "data.train[" + std::to_string(i) + "]." + field;
  };
  std::vector<double> weights;
  double total = 0;
  for (std::size_t i = 0; i < mixture.size(); ++i) {
    const DataSource& s = mixture[i];
    if (s.path.empty())
      source.fail_key(key(i, "path"),
                      "must name the source's training shards (a file, directory or glob)");
    if (!(s.weight > 0)) source.fail_key(key(i, "weight"), "must be > 0, got ", s.weight);
    weights.push_back(s.weight);
    total += s.weight;
    const bool usable = !s.name.empty() && s.name.size() <= kMaxNameLength &&
                        std::ranges::all_of(s.name, is_name_character);
    if (!usable)
      source.fail_key(key(i, "name"), "must be 1 to ", kMaxNameLength,
                      " letters, digits, '.', '_' or '-' (it names the source in the metrics), "
                      "got '",
                      s.name, "'");
    for (std::size_t j = 0; j < i; ++j)
      if (mixture[j].name == s.name)
        source.fail_key(key(i, "name"), "is '", s.name, "', as is data.train[", j,
                        "].name: sources need unique names (one without `name` takes the last ",
                        "meaningful component of its path)");
  }
  if (const auto small = mixture_weight_too_small(weights)) {
    char share[32];
    std::snprintf(share, sizeof share, "%.4g%%", 100 * weights[*small] / total);
    source.fail_key(key(*small, "weight"), "(", weights[*small], ") is ", share,
                    " of the sources' total weight (", total, "); a source needs at least 1/",
                    kMixtureBlock, " of it (mixtures are drawn in blocks of ", kMixtureBlock,
                    " samples)");
  }
}

}  // namespace config_detail
}  // namespace strata

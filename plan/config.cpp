// Reading and writing the YAML config: text -> YAML tree -> --set overrides -> key check -> typed
// fields -> validation (config_validate.cpp). The key list lives in config_fields.h.
#include "plan/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <type_traits>

#include "data/utf8.h"
#include "model/core/error.h"
#include "plan/config_fields.h"

namespace strata {
namespace config_detail {
namespace {

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    const auto dot = path.find('.', start);
    parts.emplace_back(path.substr(start, dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

std::string parent_of(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string() : std::string(path.substr(0, dot));
}

std::string last_of(std::string_view path) {
  const auto dot = path.rfind('.');
  return std::string(dot == std::string_view::npos ? path : path.substr(dot + 1));
}

std::string lowercase(std::string_view text) {
  std::string result(text);
  for (auto& c : result) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return result;
}

std::string join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// Every key path, and every section (a path with keys below it), from visit_fields.
struct Schema {
  std::vector<std::string> leaves;
  std::set<std::string> sections;

  Schema() {
    Config defaults;
    visit_fields(defaults, [this](std::string_view path, auto&&) {
      leaves.emplace_back(path);
      for (std::string section = parent_of(path); !section.empty(); section = parent_of(section))
        sections.insert(section);
    });
  }
  bool is_leaf(const std::string& path) const {
    return std::find(leaves.begin(), leaves.end(), path) != leaves.end();
  }
  bool is_section(const std::string& path) const { return sections.contains(path); }

  // "(did you mean 'x.y'?)" for a plausible typo of a sibling key, or for the same key name in
  // another section (`train.lr` or a top-level `lr` -> `optimizer.lr`); "" when nothing fits.
  std::string suggestion(const std::string& path) const {
    const std::string parent = parent_of(path);
    const std::string name = last_of(path);
    std::vector<std::string> siblings;  // keys and nested sections (`parallel.zero`) of `parent`
    for (const auto& leaf : leaves) {
      for (std::string p = leaf; !p.empty(); p = parent_of(p)) {
        if (parent_of(p) == parent && std::ranges::find(siblings, last_of(p)) == siblings.end())
          siblings.push_back(last_of(p));
      }
    }
    if (const auto word = closest_word(name, siblings); !word.empty())
      return " (did you mean '" + join(parent, word) + "'?)";
    // A shortened key (`warmup` for `warmup_steps`), when only one key starts that way.
    std::vector<std::string> longer;
    for (const auto& sibling : siblings) {
      if (name.size() >= 3 && sibling.starts_with(lowercase(name))) longer.push_back(sibling);
    }
    if (longer.size() == 1) return " (did you mean '" + join(parent, longer[0]) + "'?)";
    for (const auto& leaf : leaves) {
      if (lowercase(last_of(leaf)) == lowercase(name)) return " (did you mean '" + leaf + "'?)";
    }
    return "";
  }
};

const Schema& schema() {
  static const Schema instance;
  return instance;
}

[[noreturn]] void fail_unknown_key(const std::string& where, const std::string& path,
                                   const std::string& origin = "") {
  fail(where, ": unknown key '", path, "'", schema().suggestion(path), origin);
}

YAML::Node load_yaml(const std::string& text, const std::string& where) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    // yaml-cpp marks are 0-based; editors count lines and columns from 1.
    if (e.mark.is_null()) fail(where, ": invalid YAML: ", e.msg);
    fail(where, ":", e.mark.line + 1, ":", e.mark.column + 1, ": invalid YAML: ", e.msg);
  }
}

// Assigns `value` at keys[i..] below `node`, creating empty sections on the way.
void assign(YAML::Node node, const std::vector<std::string>& keys, std::size_t i,
            const YAML::Node& value, const ConfigSource& source) {
  if (i + 1 == keys.size()) {
    node[keys[i]] = value;
    return;
  }
  const YAML::Node& const_node = node;
  const YAML::Node existing = const_node[keys[i]];
  if (!existing || existing.IsNull()) {
    node[keys[i]] = YAML::Node(YAML::NodeType::Map);
  } else if (!existing.IsMap()) {
    std::string path;
    for (std::size_t k = 0; k <= i; ++k) path = join(path, keys[k]);
    source.fail_key(path, "must be a map of keys, got ", describe(existing));
  }
  assign(node[keys[i]], keys, i + 1, value, source);
}

// Applies one `--set key.path=value`: the key must exist (same check as in the file), the value
// is parsed as YAML so lists and maps work (`parallel.pp_layers=[1,3]`).
void apply_override(YAML::Node& root, const std::string& text, ConfigSource& source) {
  const auto where = "--set '" + text + "'";
  const auto equals = text.find('=');
  if (equals == std::string::npos || equals == 0) fail(where, ": expected key.path=value");
  const std::string path = text.substr(0, equals);
  const auto keys = split_path(path);
  if (std::any_of(keys.begin(), keys.end(), [](const auto& k) { return k.empty(); }))
    fail(where, ": expected key.path=value");

  std::string prefix;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    prefix = join(prefix, keys[i]);
    const bool last = i + 1 == keys.size();
    if (schema().is_section(prefix)) continue;
    if (last && schema().is_leaf(prefix)) continue;
    // Below a leaf (`recompute.x`), the whole path is what is unknown.
    fail_unknown_key(where, schema().is_leaf(prefix) ? path : prefix);
  }
  assign(root, keys, 0, load_yaml(text.substr(equals + 1), where), source);
  source.note_override(path, text);
}

// Rejects unknown and duplicate keys, and sections that are not maps, before any value is read.
void check_keys(const YAML::Node& map, const std::string& prefix, const ConfigSource& source) {
  std::set<std::string> seen;
  for (const auto& entry : map) {
    if (!entry.first.IsScalar())
      fail(source.name(), ": a key", prefix.empty() ? "" : " in '" + prefix + "'",
           " is not a name: ", describe(entry.first));
    const std::string path = join(prefix, entry.first.Scalar());
    if (!seen.insert(entry.first.Scalar()).second)
      fail(source.name(), ": duplicate key '", path, "'");
    if (schema().is_leaf(path)) continue;
    if (!schema().is_section(path)) fail_unknown_key(source.name(), path, source.origin(path));
    if (entry.second.IsMap()) {
      check_keys(entry.second, path, source);
    } else if (!entry.second.IsNull()) {  // `checkpoint:` with nothing keeps the defaults
      source.fail_key(path, "must be a map of keys, got ", describe(entry.second));
    }
  }
}

// Finds the node at `path`; std::nullopt when the key (or a section above it) is absent.
std::optional<YAML::Node> find_node(const YAML::Node& root, std::string_view path) {
  YAML::Node node = root;
  for (const auto& key : split_path(path)) {
    if (!node.IsMap()) return std::nullopt;
    const YAML::Node& const_node = node;  // const lookup: no empty entries created
    const YAML::Node child = const_node[key];
    if (!child) return std::nullopt;
    node.reset(child);  // rebinds; operator= would overwrite the parent's value instead
  }
  return node;
}

template <class Int>
std::optional<Int> parse_integer(std::string_view text, std::errc& error) {
  if (text.starts_with('+')) text.remove_prefix(1);
  Int value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  error = ec;
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// Converts each present key's node into its typed field; absent keys keep the struct defaults.
class FieldReader {
 public:
  FieldReader(const YAML::Node& root, const ConfigSource& source) : root_(root), source_(source) {}

  template <class Int>
  requires std::is_integral_v<Int> &&(!std::is_same_v<Int, bool>)void operator()(
      std::string_view path, Int& out) const {
    if (const auto node = find_node(root_, path)) out = integer<Int>(path, *node);
  }
  void operator()(std::string_view path, double& out) const {
    const auto node = find_node(root_, path);
    if (!node) return;
    const auto& text = scalar(path, *node, "a number");
    const auto value = parse_number(text);
    if (!value) source_.fail_key(path, "must be a number, got '", text, "'");
    out = *value;
  }
  void operator()(std::string_view path, bool& out) const {
    const auto node = find_node(root_, path);
    if (!node) return;
    const auto& text = scalar(path, *node, "true or false");
    if (text != "true" && text != "false")
      source_.fail_key(path, "must be true or false, got '", text, "'");
    out = text == "true";
  }
  void operator()(std::string_view path, std::string& out) const {
    const auto node = find_node(root_, path);
    if (!node) return;
    out = node->IsNull() ? std::string() : scalar(path, *node, "a string");
    // A control character means nothing in a name or a path, and the YAML written back does not
    // read as the same string (found by tests/fuzz/config_fuzz.cpp: the effective config did not
    // round-trip).
    for (const char c : out)
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t')
        source_.fail_key(path, "must be a string without control characters");
  }
  void operator()(std::string_view path, std::vector<int>& out) const {
    const auto node = find_node(root_, path);
    if (!node) return;
    out.clear();
    if (node->IsNull()) return;
    if (!node->IsSequence())
      source_.fail_key(path, "must be a list of integers, got ", describe(*node));
    for (std::size_t i = 0; i < node->size(); ++i)
      out.push_back(integer<int>(std::string(path) + "[" + std::to_string(i) + "]", (*node)[i]));
  }
  template <class E, std::size_t N>
  void operator()(std::string_view path, Choice<E, N> choice) const {
    const auto node = find_node(root_, path);
    if (!node) return;
    const std::string expected = choice.choices.list();
    const auto& text = scalar(path, *node, expected.c_str());
    const auto value = choice.choices.find(text);
    if (!value) {
      const auto word = closest_word(text, choice.choices.words());
      source_.fail_key(path, "must be ", expected, ", got '", text, "'",
                       word.empty() ? "" : " (did you mean '" + word + "'?)");
    }
    choice.value = *value;
  }
  template <class E, std::size_t N>
  void operator()(std::string_view path, ChoiceList<E, N> list) const {
    const auto node = find_node(root_, path);
    if (!node) return;
    const std::string expected = "a list of " + list.choices.list();
    list.values.clear();
    if (node->IsNull()) return;  // an empty list, as a list of integers reads it
    if (!node->IsSequence())
      source_.fail_key(path, "must be ", expected, ", got ", describe(*node));
    for (std::size_t i = 0; i < node->size(); ++i) {
      const std::string at = std::string(path) + "[" + std::to_string(i) + "]";
      const auto& text = scalar(at, (*node)[i], list.choices.list().c_str());
      const auto value = list.choices.find(text);
      if (!value) {
        const auto word = closest_word(text, list.choices.words());
        source_.fail_key(at, "must be ", list.choices.list(), ", got '", text, "'",
                         word.empty() ? "" : " (did you mean '" + word + "'?)");
      }
      if (std::find(list.values.begin(), list.values.end(), *value) != list.values.end())
        source_.fail_key(at, "names '", text, "' twice");
      list.values.push_back(*value);
    }
    // A set: in the table's order, so that [b, a] and [a, b] are the same config.
    std::sort(list.values.begin(), list.values.end());
  }
  void operator()(std::string_view path, AutoCount count) const {
    const auto node = find_node(root_, path);
    if (!node) return;
    const std::string what =
        count.least == 1 ? "a positive integer" : "an integer >= " + std::to_string(count.least);
    const auto& text = scalar(path, *node, ("'auto' or " + what).c_str());
    std::errc error;
    const auto value = parse_integer<int>(text, error);
    if (text != "auto" && (!value || *value < count.least))
      source_.fail_key(path, "must be 'auto' or ", what, ", got '", text, "'");
    count.value = text == "auto" ? count.least - 1 : *value;
  }
  void operator()(std::string_view path, TrainData data) const {
    if (const auto node = find_node(root_, path))
      read_train_data(*node, std::string(path), data, source_);
  }
  void operator()(std::string_view path, LossScale scale) const {
    const auto node = find_node(root_, path);
    if (!node) return;
    const auto& text = scalar(path, *node, "'dynamic' or a positive number");
    const auto value = parse_number(text);
    if (text != "dynamic" && (!value || *value <= 0))
      source_.fail_key(path, "must be 'dynamic' or a positive number, got '", text, "'");
    scale.value = text;
  }

 private:
  const std::string& scalar(std::string_view path, const YAML::Node& node,
                            const char* expected) const {
    if (!node.IsScalar()) source_.fail_key(path, "must be ", expected, ", got ", describe(node));
    return node.Scalar();
  }
  template <class Int>
  Int integer(std::string_view path, const YAML::Node& node) const {
    const auto& text = scalar(path, node, "an integer");
    std::errc error;
    const auto value = parse_integer<Int>(text, error);
    if (error == std::errc::result_out_of_range)
      source_.fail_key(path, "must be an integer in [", std::numeric_limits<Int>::min(), ", ",
                       std::numeric_limits<Int>::max(), "], got '", text, "'");
    if (!value) source_.fail_key(path, "must be an integer, got '", text, "'");
    return *value;
  }

  const YAML::Node& root_;
  const ConfigSource& source_;
};

// Emits fields in visit order as nested block maps, opening and closing sections as the path
// prefix changes. With `sources`, each value is followed by a comment naming where it came from.
class FieldWriter {
 public:
  FieldWriter(YAML::Emitter& out, const Config& config, const ConfigSources* sources)
      : out_(out), config_(config), sources_(sources) {}
  ~FieldWriter() { close_to(0); }

  template <class Int>
  requires std::is_integral_v<Int>
  void operator()(std::string_view path, const Int& value) {
    key(path) << value;
    note(path);
  }
  void operator()(std::string_view path, const double& value) {
    // Shortest text that parses back to the same double, so the written config reproduces the run.
    char text[32];
    const auto result = std::to_chars(text, text + sizeof text, value);
    key(path) << std::string(text, result.ptr);
    note(path);
  }
  void operator()(std::string_view path, const std::string& value) {
    key(path);
    emit_string(out_, value);
    note(path, path == "checkpoint.dir" && value.empty()
                   ? "empty: " + config_.checkpoint_directory()
                   : "");
  }
  void operator()(std::string_view path, const std::vector<int>& values) {
    key(path) << YAML::Flow << YAML::BeginSeq;
    for (const int value : values) out_ << value;
    out_ << YAML::EndSeq;
    note(path);
  }
  template <class E, std::size_t N>
  void operator()(std::string_view path, const Choice<E, N>& choice) {
    key(path) << std::string(choice.choices.word(choice.value));
    note(path);
  }
  template <class E, std::size_t N>
  void operator()(std::string_view path, const ChoiceList<E, N>& list) {
    key(path) << YAML::Flow << YAML::BeginSeq;
    for (const E value : list.values) out_ << std::string(list.choices.word(value));
    out_ << YAML::EndSeq;
    note(path);
  }
  void operator()(std::string_view path, const AutoCount& count) {
    if (count.is_auto()) {
      key(path) << "auto";
      note(path, count.auto_means);
    } else {
      key(path) << count.value;
      note(path);
    }
  }
  void operator()(std::string_view path, const LossScale& scale) {
    key(path) << scale.value;
    note(path);
  }
  void operator()(std::string_view path, const TrainData& data) {
    key(path);
    write_train_data(out_, data);
    note(path);
  }

 private:
  YAML::Emitter& key(std::string_view path) {
    auto keys = split_path(path);
    const std::string name = keys.back();
    keys.pop_back();
    std::size_t common = 0;
    while (common < open_.size() && common < keys.size() && open_[common] == keys[common]) ++common;
    close_to(common);
    for (std::size_t i = common; i < keys.size(); ++i) {
      out_ << YAML::Key << keys[i] << YAML::Value << YAML::BeginMap;
      open_.push_back(keys[i]);
    }
    return out_ << YAML::Key << name << YAML::Value;
  }
  void close_to(std::size_t depth) {
    for (; open_.size() > depth; open_.pop_back()) out_ << YAML::EndMap;
  }

  // One comment after a value: what it means (`remark`), then where it came from.
  void note(std::string_view path, const std::string& remark = "") {
    std::string text = remark;
    if (sources_ != nullptr) {
      const auto it = sources_->find(std::string(path));
      text += (text.empty() ? "" : "; ") + (it == sources_->end() ? "default" : it->second);
    }
    if (!text.empty()) out_ << YAML::Comment(text);
  }

  YAML::Emitter& out_;
  const Config& config_;
  const ConfigSources* sources_;
  std::vector<std::string> open_;
};

}  // namespace

void emit_string(YAML::Emitter& out, const std::string& value) {
  const bool control = std::any_of(value.begin(), value.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
  if (control) out << YAML::DoubleQuoted;
  out << value;
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    default:
      return "nothing";
  }
}

std::optional<double> parse_number(std::string_view text) {
  if (text.starts_with('+')) text.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() ||
      !std::isfinite(value))
    return std::nullopt;
  return value;
}

std::string closest_word(std::string_view word, std::span<const std::string> candidates) {
  const std::string a = lowercase(word);
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const auto& candidate : candidates) {
    // Optimal string alignment distance: Levenshtein plus adjacent transpositions ("stpes").
    const std::string b = lowercase(candidate);
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
    if (d[a.size()][b.size()] < best_distance) {
      best_distance = d[a.size()][b.size()];
      best = candidate;
    }
  }
  // At most 3 edits, and fewer than half the word: "xyz" is not a typo of "dp".
  const std::size_t limit = std::min<std::size_t>(3, std::max<std::size_t>(1, a.size() / 2));
  return best_distance <= limit ? best : std::string();
}

}  // namespace config_detail

using config_detail::ConfigSource;

std::string Config::run_directory() const {
  return (std::filesystem::path(run.dir) / run.name).string();
}

std::string Config::checkpoint_directory() const {
  return checkpoint.dir.empty() ? (std::filesystem::path(run_directory()) / "checkpoints").string()
                                : checkpoint.dir;
}

namespace {
// YAML is UTF-8 text without NUL bytes; yaml-cpp would pass other bytes through into strings
// that the effective config (config_to_yaml) cannot write back as they were, and takes a text
// opening with NUL bytes for UTF-16 or UTF-32, decoding it into code points that are no Unicode
// (both found by fuzzing: docs/FUZZING.md).
void check_utf8(const std::string& text, const std::string& where) {
  auto line_of = [&](std::size_t at) {
    return 1 + std::count(text.begin(), text.begin() + static_cast<long>(at), '\n');
  };
  if (const auto bad = find_invalid_utf8(text)) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(text[*bad]));
    fail(where, ":", line_of(*bad), ": not valid UTF-8 (byte ", hex, " at offset ", *bad, ")");
  }
  if (const std::size_t nul = text.find('\0'); nul != std::string::npos)
    fail(where, ":", line_of(nul), ": a NUL byte at offset ", nul, " (YAML is text without them)");
}
}  // namespace

namespace {
// One file's (or text's) top-level map of sections.
// A key given twice in one map of one file, named with its line: yaml-cpp keeps both entries, and
// merging files (merge_into) would lay the second onto the first before check_keys could see it.
void reject_duplicate_keys(const YAML::Node& map, const std::string& prefix,
                           const std::string& source_name) {
  std::set<std::string> seen;
  for (const auto& entry : map) {
    if (!entry.first.IsScalar()) continue;  // check_keys names it
    const std::string path = config_detail::join(prefix, entry.first.Scalar());
    if (!seen.insert(entry.first.Scalar()).second)
      fail(source_name, ", line ", entry.first.Mark().line + 1, ": duplicate key '", path, "'");
    if (entry.second.IsMap()) reject_duplicate_keys(entry.second, path, source_name);
  }
}

YAML::Node top_level_map(const std::string& yaml_text, const std::string& source_name) {
  check_utf8(yaml_text, source_name);
  YAML::Node root = config_detail::load_yaml(yaml_text, source_name);
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);  // an empty file: all defaults
  if (!root.IsMap())
    fail(source_name, ": expected a map of sections at the top level, got ",
         config_detail::describe(root));
  reject_duplicate_keys(root, "", source_name);
  return root;
}

// `over` laid onto `base`: maps merged key by key, anything else (a scalar, a list) replaced
// whole, so a later file wins key by key and a list is never half of each.
void merge_into(YAML::Node base, const YAML::Node& over, const std::string& source_name) {
  for (const auto& entry : over) {
    if (!entry.first.IsScalar())
      fail(source_name, ": a key is not a name: ", config_detail::describe(entry.first));
    const std::string key = entry.first.Scalar();
    YAML::Node existing = base[key];
    if (existing.IsMap() && entry.second.IsMap())
      merge_into(existing, entry.second, source_name);
    else
      base[key] = YAML::Clone(entry.second);
  }
}

std::string read_config_text(const std::string& path) {
  // C stdio rather than ifstream: it reports why (errno), including reading a directory.
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) fail("cannot read config '", path, "': ", std::strerror(errno));
  std::string text;
  char buffer[4096];
  std::size_t count = 0;
  while ((count = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, count);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) fail("cannot read config '", path, "': ", std::strerror(error));
  return text;
}

Config config_from_root(YAML::Node root, const std::string& source_name,
                        const std::vector<std::string>& overrides) {
  for (const auto& text : overrides) check_utf8(text, "a --set override");
  ConfigSource source(source_name);
  for (const auto& text : overrides) config_detail::apply_override(root, text, source);
  config_detail::check_keys(root, "", source);

  Config config;
  config_detail::visit_fields(config, config_detail::FieldReader(root, source));
  // zbv allows only 2 (the V's two arms): left out, the key takes it; given, it is validated.
  if (config.parallel.pipeline_schedule == PipelineSchedule::zbv &&
      !config_detail::find_node(root, "parallel.virtual_stages"))
    config.parallel.virtual_stages = 2;
  config_detail::validate_config(config, source);
  return config;
}
}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides) {
  return config_from_root(top_level_map(yaml_text, source_name), source_name, overrides);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return load_configs({path}, overrides);
}

Config load_configs(const std::vector<std::string>& paths,
                    const std::vector<std::string>& overrides) {
  return load_configs_with_sources(paths, overrides).config;
}

LoadedConfig load_configs_with_sources(const std::vector<std::string>& paths,
                                       const std::vector<std::string>& overrides) {
  STRATA_CHECK(!paths.empty());
  YAML::Node merged(YAML::NodeType::Map);
  std::vector<YAML::Node> files;
  std::string source_name;
  for (const std::string& path : paths) {
    files.push_back(top_level_map(read_config_text(path), path));
    merge_into(merged, files.back(), path);
    source_name += (source_name.empty() ? "" : " + ") + path;
  }
  LoadedConfig loaded{config_from_root(merged, source_name, overrides), {}};
  // The last --set that assigns the key or a section above it, else the last file giving it.
  Config copy = loaded.config;
  config_detail::visit_fields(copy, [&](std::string_view path, auto&&) {
    for (auto text = overrides.rbegin(); text != overrides.rend(); ++text) {
      const std::string key = text->substr(0, text->find('='));
      if (path == key || (path.starts_with(key) && path[key.size()] == '.')) {
        loaded.sources[std::string(path)] = "--set '" + *text + "'";
        return;
      }
    }
    for (std::size_t i = files.size(); i-- > 0;) {
      if (config_detail::find_node(files[i], path)) {
        loaded.sources[std::string(path)] = paths[i];
        return;
      }
    }
  });
  return loaded;
}

std::string config_to_yaml(const Config& config, const ConfigSources* sources) {
  YAML::Emitter out;
  out << YAML::Comment("Strata run config (every key; see docs/ARCHITECTURE.md §3)");
  out << YAML::BeginMap;
  {
    Config copy = config;  // visit_fields hands out mutable references; the writer only reads
    config_detail::FieldWriter writer(out, config, sources);
    config_detail::visit_fields(copy, writer);
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace strata

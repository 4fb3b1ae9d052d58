// <run>/metrics.jsonl: one JSON object per line (docs/ARCHITECTURE.md §5). Training lines carry
// step, loss, lr, grad_norm, tokens_per_s, step_ms (and memory, communication); evaluation lines
// step, val_loss. Only one rank writes. On resume, lines of steps after the resumed checkpoint are
// dropped first, so the file always describes one consistent run. Every line also goes, as scalars
// at its step, to TensorBoard's event files in tensorboard/ beside the file
// (train/metrics/tensorboard.h).
//
// JsonLine is the one JSON builder of the project: the metrics lines, and every tool that prints
// JSON (bench), build their objects with it rather than by hand.
#pragma once

#include <concepts>
#include <cstdint>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "train/metrics/tensorboard.h"

namespace strata {

struct CommStats;  // parallel/comm/communicator.h

// The default number format: 17 significant digits round-trip any double (%.9g for loss-like
// values would lose bits).
inline constexpr const char* kJsonRoundTrip = "%.17g";

// `value` as a JSON number written with the printf `format` (one double conversion: "%.17g",
// "%.2f"), or null when it is NaN or infinite (JSON has neither).
std::string json_number(double value, const char* format = kJsonRoundTrip);

// [v0, v1, ...], each as json_number(v, format).
template <std::floating_point F>
std::string json_array(const std::vector<F>& values, const char* format = kJsonRoundTrip) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ", ";
    out += json_number(static_cast<double>(values[i]), format);
  }
  return out + "]";
}

// Integers are written exactly (a bool is not one: it is written true/false).
template <class I>
concept JsonInteger = std::integral<I> && !std::same_as<I, bool>;

// Builds one JSON object: members in the order added, written `{"key": value, "key": value}`.
// Strings are escaped (quotes, backslashes, control characters); keys are written as given.
class JsonLine {
 public:
  // Numbers: round-tripping digits by default; a printf `format` where a figure has a known
  // precision (a benchmark's "%.2f" milliseconds).
  JsonLine& add(const std::string& key, double value, const char* format = kJsonRoundTrip);
  template <JsonInteger I>
  JsonLine& add(const std::string& key, I value) {
    if constexpr (std::is_signed_v<I>)
      return add_integer(key, std::to_string(static_cast<std::int64_t>(value)));
    else
      return add_integer(key, std::to_string(static_cast<std::uint64_t>(value)));
  }
  JsonLine& add(const std::string& key, bool value);
  JsonLine& add(const std::string& key, const std::string& value);
  // A string literal is text (without this overload it would convert to bool).
  JsonLine& add(const std::string& key, const char* value) { return add(key, std::string(value)); }
  // A nested object.
  JsonLine& add(const std::string& key, const JsonLine& object);
  // An array of objects (one per pipeline stage, say).
  JsonLine& add(const std::string& key, const std::vector<JsonLine>& objects);
  // An array of strings (config.json's "architectures").
  JsonLine& add(const std::string& key, const std::vector<std::string>& values);
  // An array of numbers, each written as add(key, value, format) would.
  template <std::floating_point F>
  JsonLine& add(const std::string& key, const std::vector<F>& values,
                const char* format = kJsonRoundTrip) {
    return add_raw(key, json_array(values, format));
  }
  // An array of integers, written exactly.
  template <JsonInteger I>
  JsonLine& add(const std::string& key, const std::vector<I>& values) {
    std::string out = "[";
    for (std::size_t i = 0; i < values.size(); ++i)
      out.append(i > 0 ? ", " : "").append(std::to_string(values[i]));
    return add_raw(key, out + "]");
  }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  // `json` must already be one JSON value (the overloads above make sure of it).
  JsonLine& add_raw(const std::string& key, const std::string& json);
  void key(const std::string& k);
  JsonLine& add_integer(const std::string& key, const std::string& digits);
  std::string body_;
};

// A training line's "comm_bytes" (ARCHITECTURE §5): bytes sent per collective kind, then per link
// class, {"all_reduce": {"intra_node": 1024, "inter_node": 512}, ...}; kinds and link classes in
// the stats' order, a link class only where the stats hold an entry for it.
JsonLine comm_bytes_json(const CommStats& stats);

class MetricsWriter {
 public:
  // Opens <path> for appending after dropping lines whose "step" exceeds keep_through_step
  // (pass -1 to start a new file), and starts a new TensorBoard event file in tensorboard/ beside
  // <path> (EventFileWriter: with -1, after removing the event files of an earlier run there).
  MetricsWriter(const std::string& path, std::int64_t keep_through_step);
  // One line of <path> and one event of its scalars, both flushed.
  void write(const JsonLine& line);

 private:
  std::ofstream out_;
  EventFileWriter events_;
};

}  // namespace strata

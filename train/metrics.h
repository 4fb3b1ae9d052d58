// <run>/metrics.jsonl: one JSON object per line (DESIGN §5). Training lines carry step, loss, lr,
// grad_norm, tokens_per_s, step_ms (and memory, communication); evaluation lines step, val_loss.
// Only one rank writes. On resume, lines of steps after the resumed checkpoint are dropped first,
// so the file always describes one consistent run.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace strata {

// Builds one JSON object; numbers are written with enough digits to round-trip (%.9g for floats
// of loss-like values would lose bits, so doubles use 17 significant digits).
class JsonLine {
 public:
  JsonLine& add(const std::string& key, double value);
  JsonLine& add(const std::string& key, std::int64_t value);
  JsonLine& add(const std::string& key, int value) {
    return add(key, static_cast<std::int64_t>(value));
  }
  JsonLine& add(const std::string& key, const std::string& value);
  JsonLine& add(const std::string& key, bool value);
  JsonLine& add_raw(const std::string& key, const std::string& json);  // value already JSON
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& k);
  std::string body_;
};

class MetricsWriter {
 public:
  // Opens <path> for appending after dropping lines whose "step" exceeds keep_through_step
  // (pass -1 to start a new file).
  MetricsWriter(const std::string& path, std::int64_t keep_through_step);
  void write(const JsonLine& line);

 private:
  std::ofstream out_;
};

}  // namespace strata

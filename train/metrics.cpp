#include "train/metrics.h"

#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "model/core/error.h"

namespace strata {

void JsonLine::key(const std::string& k) {
  if (!body_.empty()) body_ += ", ";
  body_ += "\"" + k + "\": ";
}

JsonLine& JsonLine::add(const std::string& k, double value) {
  key(k);
  if (!std::isfinite(value)) {
    body_ += "null";  // JSON has no NaN/Inf
    return *this;
  }
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  body_ += buffer;
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, std::int64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, const std::string& value) {
  key(k);
  body_ += '"';
  for (char c : value) {
    if (c == '"' || c == '\\') body_ += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
      body_ += buffer;
      continue;
    }
    body_ += c;
  }
  body_ += '"';
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

JsonLine& JsonLine::add_raw(const std::string& k, const std::string& json) {
  key(k);
  body_ += json;
  return *this;
}

namespace {
// The integer after "step": in a metrics line, or -1.
std::int64_t step_of(const std::string& line) {
  const auto at = line.find("\"step\": ");
  if (at == std::string::npos) return -1;
  return std::strtoll(line.c_str() + at + 8, nullptr, 10);
}
}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, std::int64_t keep_through_step) {
  std::vector<std::string> kept;
  if (keep_through_step >= 0) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);)
      if (step_of(line) <= keep_through_step) kept.push_back(line);
  }
  out_.open(path, std::ios::trunc);
  if (!out_) fail("cannot write metrics file '", path, "'");
  for (const std::string& line : kept) out_ << line << '\n';
  out_.flush();
}

void MetricsWriter::write(const JsonLine& line) {
  out_ << line.str() << '\n';
  out_.flush();
}

}  // namespace strata

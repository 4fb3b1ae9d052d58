#include "train/metrics/metrics.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "model/core/error.h"
#include "parallel/comm/communicator.h"

namespace strata {

std::string json_number(double value, const char* format) {
  if (!std::isfinite(value)) return "null";  // JSON has no NaN/Inf
  // Measured first: "%.2f" of a large value needs hundreds of characters.
  const int length = std::snprintf(nullptr, 0, format, value);
  STRATA_CHECK(length >= 0, "bad number format '", format, "'");
  std::string text(static_cast<std::size_t>(length), '\0');
  std::snprintf(text.data(), text.size() + 1, format, value);
  return text;
}

void JsonLine::key(const std::string& k) {
  if (!body_.empty()) body_ += ", ";
  body_ += "\"" + k + "\": ";
}

JsonLine& JsonLine::add(const std::string& k, double value, const char* format) {
  key(k);
  body_ += json_number(value, format);
  return *this;
}

JsonLine& JsonLine::add_integer(const std::string& k, const std::string& digits) {
  key(k);
  body_ += digits;
  return *this;
}

namespace {

// `value` as a JSON string, quoted and escaped.
std::string json_string(const std::string& value) {
  std::string out = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
      out += buffer;
      continue;
    }
    out += c;
  }
  return out + '"';
}

}  // namespace

JsonLine& JsonLine::add(const std::string& k, const std::string& value) {
  return add_raw(k, json_string(value));
}

JsonLine& JsonLine::add(const std::string& k, const std::vector<std::string>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i)
    out.append(i > 0 ? ", " : "").append(json_string(values[i]));
  return add_raw(k, out + "]");
}

JsonLine& JsonLine::add(const std::string& k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, const JsonLine& object) {
  return add_raw(k, object.str());
}

JsonLine& JsonLine::add(const std::string& k, const std::vector<JsonLine>& objects) {
  std::string out = "[";
  for (std::size_t i = 0; i < objects.size(); ++i)
    out.append(i > 0 ? ", " : "").append(objects[i].str());
  return add_raw(k, out + "]");
}

JsonLine& JsonLine::add_raw(const std::string& k, const std::string& json) {
  key(k);
  body_ += json;
  return *this;
}

JsonLine comm_bytes_json(const CommStats& stats) {
  JsonLine kinds;
  for (const auto& [kind, by_link] : stats.bytes) {
    JsonLine links;
    for (const auto& [link, bytes] : by_link) links.add(link_class_name(link), bytes);
    kinds.add(kind, links);
  }
  return kinds;
}

namespace {
// The integer after "step": in a metrics line, or -1.
std::int64_t step_of(const std::string& line) {
  const auto at = line.find("\"step\": ");
  if (at == std::string::npos) return -1;
  return std::strtoll(line.c_str() + at + 8, nullptr, 10);
}
}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, std::int64_t keep_through_step)
    : events_((std::filesystem::path(path).parent_path() / "tensorboard").string(),
              keep_through_step) {
  std::vector<std::string> kept;
  if (keep_through_step >= 0) {
    std::ifstream in(path);
    // Every line has a step; one that does not, or does not end its object, is the torn last
    // line of a job killed while writing it.
    for (std::string line; std::getline(in, line);) {
      const std::int64_t step = step_of(line);
      if (step >= 0 && step <= keep_through_step && line.ends_with('}')) kept.push_back(line);
    }
  }
  // The kept lines go to a new file that replaces the old one by rename: a job killed at this
  // moment leaves either file whole, never an emptied one.
  const std::string temporary = path + ".tmp";
  {
    std::ofstream rewritten(temporary, std::ios::trunc);
    for (const std::string& line : kept) rewritten << line << '\n';
    rewritten.close();
    if (!rewritten) fail("cannot write metrics file '", temporary, "'");
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) fail("cannot replace metrics file '", path, "': ", error.message());
  out_.open(path, std::ios::app);
  if (!out_) fail("cannot write metrics file '", path, "'");
}

void MetricsWriter::write(const JsonLine& line) {
  const std::string text = line.str();
  out_ << text << '\n';
  out_.flush();
  events_.write_metrics_line(text);
}

}  // namespace strata

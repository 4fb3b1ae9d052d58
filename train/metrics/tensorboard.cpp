#include "train/metrics/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "model/core/error.h"
#include "train/metrics/protobuf_wire.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kEventFilePrefix = "events.out.tfevents.";

// The byte-at-a-time table of the reflected CRC-32C: entry b is the CRC register after shifting
// the byte b through it.
constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t byte = 0; byte < 256; ++byte) {
    std::uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) != 0 ? 0x82f63b78u : 0u);
    table[byte] = crc;
  }
  return table;
}
constexpr std::array<std::uint32_t, 256> kCrc32cTable = make_crc32c_table();

std::string hostname() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') return "localhost";
  return name.data();
}

// The "step" scalar's value, removed from `scalars`; false when there is none or it is not an
// integer.
bool take_step(std::vector<Scalar>& scalars, std::int64_t& step) {
  for (auto it = scalars.begin(); it != scalars.end(); ++it) {
    if (it->tag != "step") continue;
    const double value = it->value;
    scalars.erase(it);
    if (value != std::floor(value) || std::abs(value) > 9.0e18) return false;
    step = static_cast<std::int64_t>(value);
    return true;
  }
  return false;
}

}  // namespace

std::uint32_t crc32c(std::string_view bytes) {
  std::uint32_t crc = 0xffffffffu;
  for (const char c : bytes)
    crc = (crc >> 8) ^ kCrc32cTable[(crc ^ static_cast<std::uint8_t>(c)) & 0xff];
  return crc ^ 0xffffffffu;
}

std::uint32_t masked_crc32c(std::string_view bytes) {
  const std::uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tf_record(std::string_view data) {
  std::string record;
  append_little_endian(record, data.size(), 8);
  append_little_endian(record, masked_crc32c(record), 4);
  record.append(data);
  append_little_endian(record, masked_crc32c(data), 4);
  return record;
}

std::string file_version_event(double wall_time) {
  return ProtobufWriter().add_double(1, wall_time).add_bytes(3, "brain.Event:2").bytes();
}

std::string scalars_event(double wall_time, std::int64_t step, const std::vector<Scalar>& scalars) {
  ProtobufWriter summary;
  for (const Scalar& scalar : scalars) {
    summary.add_bytes(1, ProtobufWriter()
                             .add_bytes(1, scalar.tag)
                             .add_float(2, static_cast<float>(scalar.value))
                             .bytes());
  }
  return ProtobufWriter()
      .add_double(1, wall_time)
      .add_int64(2, step)
      .add_bytes(5, summary.bytes())
      .bytes();
}

std::string session_start_event(double wall_time, std::int64_t step) {
  constexpr std::uint64_t kStart = 1;  // SessionLog.SessionStatus.START
  return ProtobufWriter()
      .add_double(1, wall_time)
      .add_int64(2, step)
      .add_bytes(7, ProtobufWriter().add_varint(1, kStart).bytes())
      .bytes();
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventFileWriter::EventFileWriter(const std::string& directory, std::int64_t keep_through_step) {
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec || !fs::is_directory(directory))
    fail("cannot create the TensorBoard directory '", directory,
         "': ", ec ? ec.message() : "not a directory");
  if (keep_through_step < 0) {
    for (const fs::directory_entry& entry : fs::directory_iterator(directory, ec))
      if (entry.path().filename().string().starts_with(kEventFilePrefix))
        fs::remove(entry.path(), ec);
  }
  const double now = wall_time_now();
  const std::string base = (fs::path(directory) / kEventFilePrefix).string() +
                           std::to_string(static_cast<std::int64_t>(now)) + "." + hostname();
  path_ = base;
  for (int suffix = 1; fs::exists(path_); ++suffix) path_ = base + "." + std::to_string(suffix);
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) fail("cannot write TensorBoard events file '", path_, "'");
  write_event(file_version_event(now));
  if (keep_through_step >= 0) write_event(session_start_event(now, keep_through_step + 1));
}

void EventFileWriter::write_metrics_line(std::string_view json) {
  std::vector<Scalar> scalars = json_scalars(json);
  std::int64_t step = 0;
  if (!take_step(scalars, step)) return;
  write_event(scalars_event(wall_time_now(), step, scalars));
}

void EventFileWriter::write_event(const std::string& event) {
  out_ << tf_record(event);
  out_.flush();
}

}  // namespace strata

#include "tools/hf/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/json_value.h"
#include "model/core/error.h"
#include "train/metrics/metrics.h"

namespace strata {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies it as is");

namespace fs = std::filesystem;

float float_from_bf16(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

float float_from_f16(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f)  // infinity or NaN (payload kept)
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0)  // normal: rebias 15 → 127
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // Subnormal m·2^-24: normalise into fp32, where it is a normal number.
  int shift = 0;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  mantissa &= 0x3ffu;
  return std::bit_cast<float>(sign | (static_cast<std::uint32_t>(113 - shift) << 23) |
                              (mantissa << 13));
}

namespace {

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;
};

std::uint64_t dtype_bytes(const std::string& dtype) { return dtype == "F32" ? 4 : 2; }

// One tensor's header entry, checked against the data buffer's `data_bytes`.
Entry parse_entry(const std::string& name, const JsonValue& value, std::uint64_t data_bytes,
                  const std::string& where) {
  const std::string tensor = where + "tensor '" + name + "': ";
  if (!value.is(JsonValue::Kind::object)) fail(tensor, "header entry is not an object");
  auto field = [&](const char* key, JsonValue::Kind kind) -> const JsonValue& {
    const JsonValue* f = value.find(key);
    if (f == nullptr) fail(tensor, "header entry has no \"", key, "\"");
    if (!f->is(kind))
      fail(tensor, "\"", key, "\" is ", json_kind_name(f->kind), ", expected ",
           json_kind_name(kind));
    return *f;
  };
  Entry entry;
  entry.name = name;
  entry.dtype = field("dtype", JsonValue::Kind::string).text;
  if (entry.dtype != "F32" && entry.dtype != "F16" && entry.dtype != "BF16")
    fail(tensor, "dtype ", entry.dtype, " is not supported (F32, F16 or BF16)");
  std::uint64_t elements = 1;
  for (const JsonValue& d : field("shape", JsonValue::Kind::array).items) {
    std::int64_t size = 0;
    if (!d.integer(size) || size < 0) fail(tensor, "shape holds ", d.text, ", not a size");
    entry.shape.push_back(size);
    // Bounded by the file: anything larger than its data cannot be stored in it.
    if (size > 0 && elements > data_bytes / static_cast<std::uint64_t>(size))
      fail(tensor, "shape is larger than the file's data (", data_bytes, " bytes)");
    elements *= static_cast<std::uint64_t>(size);
  }
  const JsonValue& offsets = field("data_offsets", JsonValue::Kind::array);
  std::int64_t begin = 0, end = 0;
  if (offsets.items.size() != 2 || !offsets.items[0].integer(begin) ||
      !offsets.items[1].integer(end) || begin < 0 || end < begin)
    fail(tensor, "data_offsets must be two byte offsets [begin, end] with begin <= end");
  entry.begin = static_cast<std::uint64_t>(begin);
  entry.end = static_cast<std::uint64_t>(end);
  if (entry.end > data_bytes)
    fail(tensor, "data_offsets [", begin, ", ", end, "] run past the data (", data_bytes,
         " bytes after the header; is the file truncated?)");
  if (entry.end - entry.begin != elements * dtype_bytes(entry.dtype))
    fail(tensor, "data_offsets [", begin, ", ", end, "] hold ", entry.end - entry.begin,
         " bytes but ", entry.dtype, " shape needs ", elements * dtype_bytes(entry.dtype));
  return entry;
}

std::vector<float> widen(const std::vector<char>& bytes, const std::string& dtype) {
  if (dtype == "F32") {
    std::vector<float> values(bytes.size() / 4);
    if (!bytes.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
    return values;
  }
  std::vector<float> values(bytes.size() / 2);
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint16_t bits = 0;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    values[i] = dtype == "F16" ? float_from_f16(bits) : float_from_bf16(bits);
  }
  return values;
}

}  // namespace

SafetensorsFile read_safetensors(const std::string& path) {
  const std::string where = path + ": ";
  std::error_code ec;
  const std::uint64_t file_bytes = fs::file_size(path, ec);
  if (ec) fail(where, "cannot read: ", ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(where, "cannot open");
  if (file_bytes < 8)
    fail(where, "is ", file_bytes,
         " bytes, too short for a safetensors file (8-byte header length)");
  std::uint64_t header_bytes = 0;
  in.read(reinterpret_cast<char*>(&header_bytes), 8);
  if (header_bytes > file_bytes - 8)
    fail(where, "header length ", header_bytes, " is more than the ", file_bytes - 8,
         " bytes that follow it (not a safetensors file, or truncated)");
  if (header_bytes > kSafetensorsMaxHeader)
    fail(where, "header length ", header_bytes, " is over the format's limit of ",
         kSafetensorsMaxHeader, " bytes");
  std::string header(header_bytes, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_bytes));
  if (!in) fail(where, "cannot read the header");
  const std::uint64_t data_bytes = file_bytes - 8 - header_bytes;

  JsonValue root;
  try {
    root = parse_json(header);
  } catch (const Error& e) {
    fail(where, "header is not valid JSON: ", e.what());
  }
  if (!root.is(JsonValue::Kind::object)) fail(where, "header is not a JSON object");
  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [name, value] : root.members) {
    if (name == "__metadata__") {
      if (!value.is(JsonValue::Kind::object)) fail(where, "__metadata__ is not an object");
      for (const auto& [key, text] : value.members) {
        if (!text.is(JsonValue::Kind::string))
          fail(where, "__metadata__ \"", key, "\" is not a string");
        file.metadata.emplace_back(key, text.text);
      }
      continue;
    }
    for (const Entry& e : entries)
      if (e.name == name) fail(where, "tensor '", name, "' appears twice in the header");
    entries.push_back(parse_entry(name, value, data_bytes, where));
  }
  // The buffer must be tiled exactly: sorted by offset, each tensor starts where the last ended.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  std::uint64_t covered = 0;
  for (const Entry& e : entries) {
    if (e.begin != covered)
      fail(where, "tensor '", e.name, "' starts at data byte ", e.begin, " but the tensors before ",
           e.begin < covered ? "overlap it (they end at " : "leave a gap (they end at ", covered,
           ")");
    covered = e.end;
  }
  if (covered != data_bytes)
    fail(where, "the tensors hold ", covered, " bytes of data but the file has ", data_bytes,
         " after the header");

  for (const Entry& e : entries) {
    std::vector<char> bytes(e.end - e.begin);
    in.seekg(static_cast<std::streamoff>(8 + header_bytes + e.begin));
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!in) fail(where, "cannot read the data of tensor '", e.name, "'");
    file.tensors.push_back({e.name, e.shape, widen(bytes, e.dtype), e.dtype});
  }
  return file;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata) {
  JsonLine header;
  if (!metadata.empty()) {
    JsonLine meta;
    for (const auto& [key, value] : metadata) meta.add(key, value);
    header.add("__metadata__", meta);
  }
  std::uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    std::uint64_t elements = 1;
    for (const std::int64_t d : t.shape) elements *= static_cast<std::uint64_t>(d);
    if (elements != t.values.size())
      fail("safetensors '", path, "': tensor '", t.name, "' has ", t.values.size(),
           " values for a shape of ", elements);
    JsonLine entry;
    entry.add("dtype", "F32").add("shape", t.shape);
    entry.add("data_offsets", std::vector<std::uint64_t>{offset, offset + 4 * elements});
    header.add(t.name, entry);
    offset += 4 * elements;
  }
  std::string text = header.str();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot write '", path, "'");
  const std::uint64_t length = text.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const SafetensorsTensor& t : tensors)
    out.write(reinterpret_cast<const char*>(t.values.data()),
              static_cast<std::streamsize>(t.values.size() * sizeof(float)));
  out.close();
  if (!out) fail("writing '", path, "' failed");
}

}  // namespace strata

// Protocol-buffer wire format, the encoding side only: just enough to write the few messages
// Strata emits (TensorBoard's Event, train/metrics/tensorboard.h) without a protobuf dependency.
//
// A message is a sequence of fields. Each field is a key, the varint (field_number << 3 |
// wire_type), followed by its value in that wire type:
//   0 varint            int64, uint64, bool, enum: 7 bits per byte, least significant group
//                       first, the high bit set on every byte but the last (a negative int64 is
//                       its two's complement as uint64: always 10 bytes)
//   1 fixed64           double: 8 bytes, little-endian
//   2 length-delimited  string, bytes, nested message: a varint byte count, then the bytes
//   5 fixed32           float: 4 bytes, little-endian
// Fields may come in any order and a repeated field is the same key written once per element,
// so a writer appends fields as it goes. Reference:
// https://protobuf.dev/programming-guides/encoding/
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

enum class WireType : std::uint8_t { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };

// Appends `value` as a varint: 1 byte below 128, 10 bytes at most.
inline void append_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

// Appends the low `bytes` bytes of `value`, least significant first (whatever the host's order).
inline void append_little_endian(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

// One message's encoding, built field by field in the order the calls come.
class ProtobufWriter {
 public:
  ProtobufWriter& add_varint(int field, std::uint64_t value) {
    key(field, WireType::varint);
    append_varint(bytes_, value);
    return *this;
  }
  ProtobufWriter& add_int64(int field, std::int64_t value) {
    return add_varint(field, static_cast<std::uint64_t>(value));
  }
  ProtobufWriter& add_double(int field, double value) {
    key(field, WireType::fixed64);
    append_little_endian(bytes_, std::bit_cast<std::uint64_t>(value), 8);
    return *this;
  }
  ProtobufWriter& add_float(int field, float value) {
    key(field, WireType::fixed32);
    append_little_endian(bytes_, std::bit_cast<std::uint32_t>(value), 4);
    return *this;
  }
  // A string, bytes, or a nested message (pass its writer's bytes()).
  ProtobufWriter& add_bytes(int field, std::string_view value) {
    key(field, WireType::length_delimited);
    append_varint(bytes_, value.size());
    bytes_.append(value);
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  void key(int field, WireType type) {
    append_varint(bytes_,
                  (static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint8_t>(type));
  }
  std::string bytes_;
};

}  // namespace strata

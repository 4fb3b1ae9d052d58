// safetensors files, Hugging Face's tensor format: an 8-byte little-endian unsigned length N, an
// N-byte JSON header, then the data buffer. The header maps each tensor name to
//   {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}
// (byte offsets into the data buffer, end exclusive; data row-major, little-endian), plus an
// optional "__metadata__" object of string values (transformers requires {"format": "pt"}).
// The tensors must cover the data buffer exactly, without gaps or overlaps (the format's rule).
//
// Reading accepts F32, F16 and BF16 tensors and widens them to fp32 exactly; it validates the
// whole file first (header length against the file size, the header's JSON and fields, dtypes,
// shapes against byte counts, offsets in range and tiling the buffer), each problem a strata::Error
// naming the file and the tensor. Writing writes F32, the header padded with spaces to a multiple
// of 8 bytes so the data is aligned (as Hugging Face's writer does).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace strata {

struct SafetensorsTensor {
  std::string name;
  std::vector<std::int64_t> shape;  // row-major; {} for a scalar
  std::vector<float> values;        // product(shape) elements
  std::string dtype = "F32";        // as stored in the file ("F32", "F16", "BF16")
};

struct SafetensorsFile {
  std::vector<SafetensorsTensor> tensors;  // in data order
  std::vector<std::pair<std::string, std::string>> metadata;
};

// The safetensors header's upper bound on N (the format's own limit: 100 MB), which also stops a
// damaged length from asking for a huge allocation.
inline constexpr std::uint64_t kSafetensorsMaxHeader = 100'000'000;

SafetensorsFile read_safetensors(const std::string& path);

// Writes `tensors` as F32 in the order given (each tensor's dtype field is ignored), with
// `metadata` as "__metadata__". An Error names a tensor whose values do not match its shape.
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata);

// IEEE half and bfloat16 bit patterns widened to fp32 (exact: every value, subnormals, infinities
// and NaNs).
float float_from_f16(std::uint16_t bits);
float float_from_bf16(std::uint16_t bits);

}  // namespace strata

#include "train/checkpoint/checkpoint_format.h"

#include <xxhash.h>

#include <cstring>

#include "model/core/counter_rng.h"

namespace strata {
namespace {

// Format 3's byte checksum, kept so that its files are still verified: 8-byte words folded through
// mix64 one after another, the length first and the zero-padded tail last.
std::uint64_t format3_checksum_bytes(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = mix64(bytes);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t word;
    std::memcpy(&word, p + i, 8);
    h = mix64(h ^ word) + i;
  }
  std::uint64_t tail = 0;
  if (bytes > i) std::memcpy(&tail, p + i, bytes - i);  // p may be null when bytes is 0
  return mix64(h ^ tail);
}

// Below this many elements a loop runs on one thread: waking the team costs more (and much more
// on a loaded machine) than the loop.
constexpr std::int64_t kParallelElements = 1 << 16;

}  // namespace

CheckpointFormat checkpoint_format_to_write(bool has_optional_buffers) {
  return has_optional_buffers ? CheckpointFormat::v5 : CheckpointFormat::v4;
}

const char* checkpoint_format_name(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::v3:
      return "strata-checkpoint-3";
    case CheckpointFormat::v4:
      return "strata-checkpoint-4";
    case CheckpointFormat::v5:
      return "strata-checkpoint-5";
  }
  return "";
}

std::optional<CheckpointFormat> checkpoint_format_named(std::string_view name) {
  for (CheckpointFormat format : {CheckpointFormat::v5, CheckpointFormat::v4, CheckpointFormat::v3})
    if (name == checkpoint_format_name(format)) return format;
  return std::nullopt;
}

std::string accepted_checkpoint_formats() {
  return std::string(checkpoint_format_name(CheckpointFormat::v5)) + ", " +
         checkpoint_format_name(CheckpointFormat::v4) + " or " +
         checkpoint_format_name(CheckpointFormat::v3);
}

std::uint64_t checksum_bytes(const void* data, std::size_t bytes, CheckpointFormat format) {
  if (format == CheckpointFormat::v3) return format3_checksum_bytes(data, bytes);
  // XXH3 reads nothing when `bytes` is 0, so a null `data` is fine there.
  return XXH3_64bits(data, bytes);
}

std::uint64_t checksum_slice(const float* values, const TensorSlice& slice, std::int64_t first,
                             std::int64_t count) {
  std::uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (count >= kParallelElements)
  for (std::int64_t i = 0; i < count; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, values + i, sizeof(bits));
    sum += mix64(hash_combine(static_cast<std::uint64_t>(slice.logical_index(first + i)), bits));
  }
  return sum;  // wraps modulo 2^64: shares add up whatever the slicing
}

}  // namespace strata

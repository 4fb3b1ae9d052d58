#include "tools/eval_logits.h"

#include <fstream>
#include <vector>

#include "data/loader.h"
#include "model/core/error.h"
#include "train/evaluate.h"

namespace strata {
namespace {

// The .npy 1.0 header of a little-endian float32 C-order array of `shape`: magic, version, a
// 2-byte length, then a Python dict literal padded with spaces and ended by '\n' so the data
// starts at a multiple of 64 bytes (NumPy's format specification).
std::string npy_header(const std::vector<std::int64_t>& shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (const std::int64_t d : shape) dict += std::to_string(d) + ", ";
  dict += "), }";
  const std::size_t prefix = 10;  // magic (6) + version (2) + header length (2)
  dict.append((64 - (prefix + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  std::string header = "\x93NUMPY";
  header += '\x01';
  header += '\x00';
  header += static_cast<char>(dict.size() & 0xff);
  header += static_cast<char>(dict.size() >> 8);
  return header + dict;
}

}  // namespace

std::int64_t write_eval_logits(const std::string& path, Gpt<float>& model, const float* params,
                               const TokenSource& split, std::int64_t n_tokens, int micro_batch) {
  const GptShape& shape = model.shape();
  const int T = shape.seq_len, V = shape.vocab_size, Vp = shape.padded_vocab();
  const auto batches = eval_batches(split, n_tokens, T, micro_batch, 0, 1);
  std::int64_t windows = 0;
  for (const auto& b : batches) windows += static_cast<std::int64_t>(b.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("--logits: cannot write '", path, "'");
  out << npy_header({windows, T, V});
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(micro_batch) * T),
      targets(inputs.size());
  for (const auto& batch : batches) {
    const int B = static_cast<int>(batch.size());
    for (int b = 0; b < B; ++b)
      eval_window(split, batch[b], T, inputs.data() + b * T, targets.data() + b * T);
    model.forward(params, inputs.data(), nullptr, B, T);  // no targets: logits stay logits
    const float* logits = model.logits();                 // (B·T, Vp)
    for (int row = 0; row < B * T; ++row)                 // the real vocabulary's columns only
      out.write(reinterpret_cast<const char*>(logits + static_cast<std::size_t>(row) * Vp),
                static_cast<std::streamsize>(V * sizeof(float)));
  }
  out.close();
  if (!out) fail("--logits: writing '", path, "' failed");
  return windows;
}

}  // namespace strata

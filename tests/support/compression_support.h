// gzip and zstd encoders for tests: they write the compressed inputs the readers must take, with
// the same libraries the readers decode with (zlib, libzstd), so no command-line tool is needed.
#pragma once

#include <zlib.h>
#include <zstd.h>

#include <stdexcept>
#include <string>

namespace strata::testing {

// One gzip member holding `text` (a gzip file's whole content when it is the only one).
inline std::string gzip_member(const std::string& text, int level = 6) {
  z_stream stream{};
  if (deflateInit2(&stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2 failed");
  std::string out(deflateBound(&stream, text.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int status = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  if (status != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  return out;
}

// One zstd frame holding `text`, with a content checksum when `checksum`.
inline std::string zstd_frame(const std::string& text, bool checksum = false) {
  ZSTD_CCtx* context = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, 3);
  ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, checksum ? 1 : 0);
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const std::size_t size =
      ZSTD_compress2(context, out.data(), out.size(), text.data(), text.size());
  ZSTD_freeCCtx(context);
  if (ZSTD_isError(size)) throw std::runtime_error(ZSTD_getErrorName(size));
  out.resize(size);
  return out;
}

// A zstd skippable frame (magic 0x184D2A50, 4-byte length, payload): decoders pass over it.
inline std::string zstd_skippable_frame(const std::string& payload) {
  std::string frame = "\x50\x2A\x4D\x18";
  const auto size = static_cast<std::uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) frame += static_cast<char>((size >> (8 * i)) & 0xFF);
  return frame + payload;
}

}  // namespace strata::testing

// Reading inputs as streams (data/compressed_stream.h, data/line_reader.h): gzip and zstd files
// decompress to exactly their text, several members or frames to their concatenation, in reads of
// any size; damaged or cut-off compressed data is an error naming the file, never a shorter text.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "data/compressed_stream.h"
#include "data/line_reader.h"
#include "tests/support/compression_support.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::error_of;
using testing::gzip_member;
using testing::TempDir;
using testing::zstd_frame;
using testing::zstd_skippable_frame;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// All of a stream's content, read `chunk` bytes at a time.
std::string read_all(const std::string& path, std::size_t chunk = 65536) {
  CompressedStream stream(path);
  std::string content;
  std::vector<char> buffer(chunk);
  while (const std::size_t got = stream.read(buffer.data(), buffer.size()))
    content.append(buffer.data(), got);
  EXPECT_EQ(stream.read(buffer.data(), buffer.size()), 0u);  // stays at the end
  return content;
}

// Several MB of varied text (more than the 1 MiB file buffer, in several pieces of it), so reads
// cross buffer and block boundaries.
std::string varied_text(std::size_t bytes, unsigned seed) {
  std::mt19937 rng(seed);
  const std::vector<std::string> words = {"token", "shard", "caf\xC3\xA9", "\xE2\x82\xAC", "zstd",
                                          "gzip",  "line",  "\n",          "  ",           "42"};
  std::string text;
  while (text.size() < bytes) text += words[rng() % words.size()] + " ";
  return text;
}

TEST(CompressedStream, NamesPickTheDecoder) {
  EXPECT_EQ(compression_of("a.jsonl.gz"), Compression::gzip);
  EXPECT_EQ(compression_of("a.txt.zst"), Compression::zstd);
  EXPECT_EQ(compression_of("a.gzip"), Compression::none);
  EXPECT_EQ(compression_of("a.jsonl"), Compression::none);
  EXPECT_EQ(without_compression_suffix("dir/a.jsonl.zst"), "dir/a.jsonl");
  EXPECT_EQ(without_compression_suffix("a.jsonl.gz"), "a.jsonl");
  EXPECT_EQ(without_compression_suffix("a.txt"), "a.txt");
}

TEST(CompressedStream, GzipAndZstdRoundTrip) {
  TempDir dir("stream_round_trip");
  const std::string text = varied_text(3 << 20, 1);
  write_file(dir / "a.txt", text);
  write_file(dir / "a.txt.gz", gzip_member(text));
  write_file(dir / "a.txt.zst", zstd_frame(text, true));
  for (const std::string name : {"a.txt", "a.txt.gz", "a.txt.zst"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(read_all(dir / name), text);
    EXPECT_EQ(read_all(dir / name, 7), text);  // tiny reads: state carried between calls
    CompressedStream stream(dir / name);
    std::vector<char> buffer(1 << 20);
    while (stream.read(buffer.data(), buffer.size()) > 0) {
    }
    EXPECT_EQ(stream.file_bytes_read(), std::filesystem::file_size(dir / name));
  }
}

TEST(CompressedStream, GzipMembersAndZstdFramesConcatenate) {
  TempDir dir("stream_concatenated");
  const std::string a = varied_text(1500000, 2), b = "second part\n", c = varied_text(70000, 3);
  write_file(dir / "m.gz", gzip_member(a) + gzip_member(b, 1) + gzip_member("") + gzip_member(c));
  EXPECT_EQ(read_all(dir / "m.gz"), a + b + c);
  write_file(dir / "m.zst", zstd_frame(a) + zstd_skippable_frame("not text") + zstd_frame(b, true) +
                                zstd_frame("") + zstd_frame(c));
  EXPECT_EQ(read_all(dir / "m.zst"), a + b + c);
}

TEST(CompressedStream, AnEmptyCompressedFileIsAnEmptyStream) {
  TempDir dir("stream_empty");
  write_file(dir / "e.gz", "");
  write_file(dir / "e.zst", "");
  write_file(dir / "z.gz", gzip_member(""));
  write_file(dir / "z.zst", zstd_frame(""));
  for (const std::string name : {"e.gz", "e.zst", "z.gz", "z.zst"})
    EXPECT_EQ(read_all(dir / name), "");
}

TEST(CompressedStream, TruncatedDataIsAnErrorNamingTheFile) {
  TempDir dir("stream_truncated");
  const std::string text = varied_text(2 << 20, 4);
  const std::string gz = gzip_member("first member\n") + gzip_member(text);
  const std::string zst = zstd_frame("first frame\n") + zstd_frame(text);
  // Cut in the middle, and just before gzip's 8-byte trailer or zstd's last block ends: the text
  // may even be complete, but the file is not.
  for (const std::size_t cut : {gz.size() / 2, gz.size() - 8, gz.size() - 1}) {
    write_file(dir / "t.jsonl.gz", gz.substr(0, cut));
    EXPECT_EQ(error_of([&] { read_all(dir / "t.jsonl.gz"); }),
              "input file '" + (dir / "t.jsonl.gz") +
                  "' is truncated: its gzip data end inside a member, after " +
                  std::to_string(cut) + " compressed bytes")
        << cut;
  }
  for (const std::size_t cut : {zst.size() / 2, zst.size() - 1}) {
    write_file(dir / "t.txt.zst", zst.substr(0, cut));
    EXPECT_EQ(error_of([&] { read_all(dir / "t.txt.zst"); }),
              "input file '" + (dir / "t.txt.zst") +
                  "' is truncated: its zstd data end inside a frame, after " + std::to_string(cut) +
                  " compressed bytes")
        << cut;
  }
}

TEST(CompressedStream, CorruptDataIsAnErrorNamingTheFileAndOffset) {
  TempDir dir("stream_corrupt");
  const std::string text = varied_text(300000, 5);
  std::string gz = gzip_member(text);
  gz[gz.size() - 6] ^= 0x55;  // the CRC-32 of the trailer
  write_file(dir / "crc.gz", gz);
  const std::string crc = error_of([&] { read_all(dir / "crc.gz"); });
  EXPECT_TRUE(crc.starts_with("input file '" + (dir / "crc.gz") +
                              "' is corrupt: gzip data error near compressed byte "))
      << crc;
  EXPECT_NE(crc.find("incorrect data check"), std::string::npos) << crc;

  write_file(dir / "plain.gz", "{\"text\": \"not compressed\"}\n");
  const std::string header = error_of([&] { read_all(dir / "plain.gz"); });
  EXPECT_TRUE(header.starts_with("input file '" + (dir / "plain.gz") + "' is corrupt: gzip"))
      << header;
  EXPECT_TRUE(header.ends_with(": incorrect header check")) << header;

  // A second member that is not gzip data (trailing garbage) is damage too.
  write_file(dir / "tail.gz", gzip_member("fine\n") + "garbage");
  EXPECT_NE(error_of([&] { read_all(dir / "tail.gz"); }).find("is corrupt"), std::string::npos);

  std::string zst = zstd_frame(text, true);
  zst[zst.size() / 2] ^= 0x55;
  write_file(dir / "bad.zst", zst);
  const std::string zstd_error = error_of([&] { read_all(dir / "bad.zst"); });
  EXPECT_TRUE(zstd_error.starts_with("input file '" + (dir / "bad.zst") +
                                     "' is corrupt: zstd data error near compressed byte "))
      << zstd_error;

  write_file(dir / "plain.zst", "plain text, not zstd");
  EXPECT_NE(error_of([&] { read_all(dir / "plain.zst"); }).find("Unknown frame descriptor"),
            std::string::npos);
}

TEST(CompressedStream, MissingFilesAndDirectoriesAreErrors) {
  TempDir dir("stream_missing");
  EXPECT_EQ(error_of([&] { CompressedStream stream(dir / "none.gz"); }),
            "cannot open '" + (dir / "none.gz") + "': No such file or directory");
  EXPECT_EQ(error_of([&] { CompressedStream stream(dir.str()); }),
            "cannot read '" + dir.str() + "': it is a directory");
}

TEST(LineReader, SplitsLinesOfAnyLengthAcrossReads) {
  TempDir dir("line_reader");
  const std::string long_line(3 << 20, 'x');  // three times the initial buffer
  const std::string text = "first\r\n\n" + long_line + "\nlast without newline";
  write_file(dir / "l.txt.zst", zstd_frame(text));
  CompressedStream stream(dir / "l.txt.zst");
  LineReader lines(stream);
  std::string_view line;
  ASSERT_TRUE(lines.next(line));
  EXPECT_EQ(line, "first\r");
  EXPECT_TRUE(lines.had_newline());
  ASSERT_TRUE(lines.next(line));
  EXPECT_EQ(line, "");
  EXPECT_EQ(lines.line_offset(), 7u);
  ASSERT_TRUE(lines.next(line));
  EXPECT_EQ(line, long_line);
  EXPECT_EQ(lines.line_number(), 3u);
  ASSERT_TRUE(lines.next(line));
  EXPECT_EQ(line, "last without newline");
  EXPECT_FALSE(lines.had_newline());
  EXPECT_EQ(lines.line_offset(), 8u + long_line.size() + 1);
  EXPECT_FALSE(lines.next(line));
  EXPECT_FALSE(lines.next(line));
  EXPECT_EQ(lines.content_bytes(), text.size());
}

}  // namespace
}  // namespace strata

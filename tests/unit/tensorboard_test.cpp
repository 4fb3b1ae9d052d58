// TensorBoard's event files (train/metrics/tensorboard.h): CRC-32C and TFRecord framing against
// published values, the protocol-buffer encoding of an Event byte by byte, how a metrics line
// flattens into tags, and the files a MetricsWriter leaves for a fresh and a resumed run. That
// TensorBoard itself reads a trained run's files is tests/python/tensorboard_read_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/test_support.h"
#include "train/metrics/json_scalars.h"
#include "train/metrics/metrics.h"
#include "train/metrics/protobuf_wire.h"
#include "train/metrics/tensorboard.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string bytes(std::initializer_list<unsigned> values) {
  std::string out;
  for (unsigned v : values) out += static_cast<char>(v);
  return out;
}

std::uint64_t read_little_endian(const std::string& data, std::size_t at, int count) {
  std::uint64_t value = 0;
  for (int i = count - 1; i >= 0; --i)
    value = (value << 8) | static_cast<std::uint8_t>(data[at + static_cast<std::size_t>(i)]);
  return value;
}

// The data of every record of a TFRecord file, each checked against its length and CRCs.
std::vector<std::string> read_records(const std::string& path) {
  const std::string file = testing::read_file(path);
  std::vector<std::string> records;
  std::size_t at = 0;
  while (at < file.size()) {
    EXPECT_LE(at + 12, file.size());
    const std::uint64_t length = read_little_endian(file, at, 8);
    EXPECT_EQ(read_little_endian(file, at + 8, 4), masked_crc32c(file.substr(at, 8)));
    const std::string data = file.substr(at + 12, length);
    EXPECT_EQ(read_little_endian(file, at + 12 + length, 4), masked_crc32c(data));
    records.push_back(data);
    at += 12 + length + 4;
  }
  EXPECT_EQ(at, file.size());
  return records;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Crc32c, MatchesPublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);  // the CRC catalogue's check value
  EXPECT_EQ(crc32c(""), 0u);
  // RFC 3720 (iSCSI), B.4: 32 bytes of zeros, of ones, and ascending 0..31.
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62a8ab43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending += static_cast<char>(i);
  EXPECT_EQ(crc32c(ascending), 0x46dd794eu);
}

TEST(TfRecord, FramesDataWithMaskedChecksums) {
  EXPECT_EQ(masked_crc32c(""), 0xa282ead8u);  // a zero CRC masks to the constant
  EXPECT_EQ(masked_crc32c("123456789"), ((0xe3069283u >> 15) | (0xe3069283u << 17)) + 0xa282ead8u);
  // Every TensorFlow event file starts with this header: a 24-byte first record (the
  // file_version event) and its length's masked CRC.
  const std::string record = tf_record(std::string(24, 'x'));
  EXPECT_EQ(record.substr(0, 12), bytes({0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22}));
  EXPECT_EQ(record.size(), 8u + 4u + 24u + 4u);
  EXPECT_EQ(read_little_endian(record, 36, 4), masked_crc32c(std::string(24, 'x')));
  EXPECT_EQ(file_version_event(1.0).size(), 24u);
}

TEST(ProtobufWire, EncodesVarintsAsSevenBitGroups) {
  const auto varint = [](std::uint64_t value) {
    std::string out;
    append_varint(out, value);
    return out;
  };
  EXPECT_EQ(varint(0), bytes({0x00}));
  EXPECT_EQ(varint(1), bytes({0x01}));
  EXPECT_EQ(varint(127), bytes({0x7f}));
  EXPECT_EQ(varint(150), bytes({0x96, 0x01}));  // protobuf's encoding guide's example
  EXPECT_EQ(varint(300), bytes({0xac, 0x02}));
  EXPECT_EQ(varint(UINT64_MAX),
            bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
  // A negative int64 is ten bytes, as its two's complement.
  EXPECT_EQ(ProtobufWriter().add_int64(2, -1).bytes(),
            bytes({0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
  EXPECT_EQ(ProtobufWriter().add_varint(1, 150).bytes(), bytes({0x08, 0x96, 0x01}));
}

TEST(ProtobufWire, EncodesAScalarEventByteByByte) {
  // Event{wall_time: 1.5, step: 3, summary: {value: [{tag: "loss", simple_value: 2}]}}
  const std::string expected = bytes({
      0x09, 0,    0,   0,   0,    0,   0, 0xf8, 0x3f,  // 1: fixed64, 1.5
      0x10, 0x03,                                      // 2: varint, 3
      0x2a, 13,                                        // 5: Summary, 13 bytes
      0x0a, 11,                                        //   1: Value, 11 bytes
      0x0a, 4,    'l', 'o', 's',  's',                 //     1: tag "loss"
      0x15, 0,    0,   0,   0x40,                      //     2: fixed32, 2.0f
  });
  EXPECT_EQ(scalars_event(1.5, 3, {{"loss", 2.0}}), expected);
  // file_version: "brain.Event:2" as field 3.
  const std::string version = file_version_event(0.0);
  EXPECT_EQ(version.substr(9), bytes({0x1a, 13}) + "brain.Event:2");
  // A restart at step 300: session_log (field 7) with status START (1).
  EXPECT_EQ(session_start_event(0.0, 300).substr(9), bytes({0x10, 0xac, 0x02, 0x3a, 2, 0x08, 1}));
}

TEST(JsonScalars, FlattensNestedObjectsAndArraysIntoTags) {
  const JsonLine line =
      JsonLine()
          .add("step", 7)
          .add("loss", 2.5)
          .add("skipped", true)
          .add("clean", false)
          .add("name", std::string("a \"quoted\" {name}"))
          .add("mfu", std::nan(""))
          .add(
              "comm_bytes",
              JsonLine().add("all_reduce", JsonLine().add("intra_node", 1024).add("inter_node", 8)))
          .add("memory_bytes", JsonLine().add("gradients", 4096).add("empty", JsonLine()))
          .add("worker_loss", std::vector<double>{2.25, -1e-3})
          .add("none", std::vector<double>{});
  const std::vector<Scalar> scalars = json_scalars(line.str());
  std::vector<std::string> tags;
  for (const Scalar& s : scalars) tags.push_back(s.tag);
  EXPECT_EQ(tags, (std::vector<std::string>{
                      "step", "loss", "skipped", "clean", "comm_bytes/all_reduce/intra_node",
                      "comm_bytes/all_reduce/inter_node", "memory_bytes/gradients", "worker_loss/0",
                      "worker_loss/1"}));
  const std::vector<double> expected{7, 2.5, 1, 0, 1024, 8, 4096, 2.25, -1e-3};
  for (std::size_t i = 0; i < scalars.size() && i < expected.size(); ++i)
    EXPECT_EQ(scalars[i].value, expected[i]) << scalars[i].tag;
}

TEST(JsonScalars, ReadsEveryNumberFormJsonLineWrites) {
  const std::vector<Scalar> scalars = json_scalars(
      "{\"a\": -0.5e-3, \"b\": 18446744073709551615, \"c\": 1E+2, \"d\": [[1], {\"e\": 0}]}");
  ASSERT_EQ(scalars.size(), 5u);
  EXPECT_EQ(scalars[0].value, -0.5e-3);
  EXPECT_EQ(scalars[1].value, 18446744073709551615.0);
  EXPECT_EQ(scalars[2].value, 100);
  EXPECT_EQ(scalars[3].tag, "d/0/0");
  EXPECT_EQ(scalars[4].tag, "d/1/e");
  EXPECT_TRUE(json_scalars("{}").empty());
}

TEST(JsonScalars, RejectsWhatIsNotOneObjectWithTheColumn) {
  EXPECT_EQ(testing::error_of([] { json_scalars("[1]"); }), "column 1: expected a JSON object");
  EXPECT_EQ(testing::error_of([] { json_scalars("{\"a\": 1} x"); }),
            "column 10: unexpected text after the object");
  EXPECT_EQ(testing::error_of([] { json_scalars("{\"a\" 1}"); }),
            "column 6: expected ':' after the member name");
  EXPECT_EQ(testing::error_of([] { json_scalars("{\"a\": inf}"); }),
            "column 7: expected a JSON value");
  EXPECT_EQ(testing::error_of([] { json_scalars("{\"a\": [1 2]}"); }),
            "column 10: expected ',' or ']'");
  EXPECT_EQ(testing::error_of([] { json_scalars("{\"a\": \"b}"); }),
            "column 7: unterminated string");
}

TEST(EventFileWriter, WritesOneEventPerMetricsLineAtItsStep) {
  testing::TempDir dir("tensorboard_writer");
  std::string path;
  {
    EventFileWriter writer(dir / "tb", -1);
    path = writer.path();
    writer.write_metrics_line(JsonLine().add("step", 3).add("loss", 2.0).str());
    writer.write_metrics_line(JsonLine().add("no_step", 1.0).str());  // nothing: no step
    writer.write_metrics_line(JsonLine().add("step", 4).str());       // an empty summary
  }
  EXPECT_TRUE(fs::path(path).filename().string().starts_with("events.out.tfevents."));
  const std::vector<std::string> records = read_records(path);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].substr(9), bytes({0x1a, 13}) + "brain.Event:2");
  // Past the wall time, the encoding scalars_event gives.
  EXPECT_EQ(records[1].substr(9), scalars_event(0.0, 3, {{"loss", 2.0}}).substr(9));
  EXPECT_EQ(records[2].substr(9), scalars_event(0.0, 4, {}).substr(9));
}

TEST(MetricsWriter, StartsAnEventFileBesideTheMetricsForEachRunAndResume) {
  testing::TempDir dir("tensorboard_metrics");
  const std::string metrics = dir / "metrics.jsonl";
  const std::string events = dir / "tensorboard";
  const auto write_steps = [&](std::int64_t keep_through_step, int from, int to) {
    MetricsWriter writer(metrics, keep_through_step);
    for (int step = from; step <= to; ++step) writer.write(JsonLine().add("step", step));
  };
  write_steps(-1, 1, 4);
  write_steps(2, 3, 4);  // a resume, within the same second as likely as not
  std::vector<std::string> files = event_files(events);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(read_records(events + "/" + files[0]).size(), 5u);
  // In name order (TensorBoard's reading order) the resumed file comes last: its version, the
  // restart at step 3, steps 3 and 4.
  const std::vector<std::string> resumed = read_records(events + "/" + files[1]);
  ASSERT_EQ(resumed.size(), 4u);
  EXPECT_EQ(resumed[1].substr(9), session_start_event(0.0, 3).substr(9));
  write_steps(-1, 1, 2);  // a fresh run replaces the earlier event files
  files = event_files(events);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(read_records(events + "/" + files[0]).size(), 3u);
}

}  // namespace
}  // namespace strata

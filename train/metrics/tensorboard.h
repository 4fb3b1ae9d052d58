// TensorBoard event files: every metrics line (train/metrics/metrics.h) also becomes scalar
// summaries at the line's step in <run>/tensorboard/events.out.tfevents.<unix seconds>.<hostname>,
// which `tensorboard --logdir <run>/tensorboard` charts. Written here without TensorFlow or
// protobuf.
//
// An event file is a TFRecord stream. Each record is
//   uint64 length | uint32 masked_crc32c(length) | data (length bytes) | uint32 masked_crc32c(data)
// with the integers little-endian, and each record's data one `Event` protocol buffer
// (TensorFlow's event.proto and summary.proto; encoding in train/metrics/protobuf_wire.h):
//   Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
//                Summary summary = 5; SessionLog session_log = 7; }  (6: a retired field)
//   Summary    { repeated Value value = 1; }
//   Value      { string tag = 1; float simple_value = 2; }
//   SessionLog { SessionStatus status = 1; }   (enum SessionStatus: START = 1)
// The first event of a file carries file_version "brain.Event:2", by which readers know the
// format; every other one the scalars of one metrics line (json_scalars' tags and values, the
// line's "step" member as the event's step), except a resumed run's restart mark (below).
// simple_value is a float: values are rounded to float32 (byte counts past 2^24 keep 24 significant
// bits; metrics.jsonl has them exactly).
//
// Resume: each MetricsWriter starts a new file, and TensorBoard reads a directory's files in name
// order (the timestamp). A resumed run writes again the steps after its checkpoint that the killed
// run may have written. Its file therefore starts with a SessionLog START event at the first step
// it writes, TensorFlow's mark of a restart: on it, TensorBoard's reader drops every event it has
// read of that step or later, so the charts show the run that metrics.jsonl describes.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "train/metrics/json_scalars.h"

namespace strata {

// CRC-32C (Castagnoli: reflected polynomial 0x82f63b78, initial and final xor 0xffffffff), the
// checksum of TFRecords. crc32c("123456789") = 0xe3069283.
std::uint32_t crc32c(std::string_view bytes);

// TFRecord's stored form of a CRC, rotated right by 15 bits plus a constant (a CRC of data that
// holds CRCs is otherwise weak): ((crc >> 15) | (crc << 17)) + 0xa282ead8.
std::uint32_t masked_crc32c(std::string_view bytes);

// `data` framed as one TFRecord.
std::string tf_record(std::string_view data);

// The encoded Event that opens a file: wall_time and file_version "brain.Event:2".
std::string file_version_event(double wall_time);

// The encoded Event of `scalars` at `step`, one Summary.Value per scalar, in order.
std::string scalars_event(double wall_time, std::int64_t step, const std::vector<Scalar>& scalars);

// The encoded Event that marks a restart at `step`: SessionLog START.
std::string session_start_event(double wall_time, std::int64_t step);

// Seconds since the Unix epoch, as TensorBoard's wall_time.
double wall_time_now();

// One event file, written a record at a time and flushed after each, so a killed run keeps every
// event written before. Only one rank writes (MetricsWriter's).
class EventFileWriter {
 public:
  // Creates `directory` if needed and a new file in it, named
  // events.out.tfevents.<unix seconds>.<hostname> (TensorBoard reads files with that prefix),
  // with ".1", ".2"... appended when the name is taken (a resume within the same second): such a
  // name still sorts after the earlier file. keep_through_step is MetricsWriter's: -1 for a fresh
  // run, which first removes the event files in `directory` (it then describes this run only);
  // a resume from the checkpoint of step S >= 0 starts its file with a SessionLog START at S + 1.
  // Throws strata::Error when the file cannot be written.
  EventFileWriter(const std::string& directory, std::int64_t keep_through_step);

  // The scalars of the metrics line `json` (json_scalars) at its "step" member, which is not
  // itself written as a scalar. A line without a numeric "step" writes nothing (every metrics
  // line has one; at a made-up step, TensorBoard would drop the events after it).
  void write_metrics_line(std::string_view json);

  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

}  // namespace strata

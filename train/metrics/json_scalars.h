// A metrics line's numbers as named scalars (the TensorBoard tags of train/metrics/tensorboard.h).
//
// The scalars are read back from the line's JSON text rather than collected while it is built, so
// that what TensorBoard charts is exactly what metrics.jsonl holds (a figure written "%.2f" is
// that rounded figure in both), and so that any metrics.jsonl line, of this run or an old one,
// flattens the same way.
//
// The parser reads exactly what JsonLine (train/metrics/metrics.h) writes: one object whose values
// are objects, arrays, numbers, strings, true, false and null, with spaces between tokens. Strings
// are only delimited, not decoded: a key is taken as written between its quotes (JsonLine writes
// keys as given), string values are skipped. Numbers are JSON numbers (an optional minus, then a
// digit).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata {

struct Scalar {
  std::string tag;
  double value = 0;
};

// Every number of the JSON object `line`, in the order written, tagged by where it sits:
//   {"loss": 2.5}                                  loss = 2.5
//   {"comm_bytes": {"all_reduce": {"intra_node": 8}}}  comm_bytes/all_reduce/intra_node = 8
//   {"worker_loss": [2.5, 2.75]}                   worker_loss/0 = 2.5, worker_loss/1 = 2.75
//   {"skipped": true}                              skipped = 1 (false: 0), so that skipped steps
//                                                  show on a chart
//   {"name": "x", "mfu": null}                     nothing: strings have no value to chart, and
//                                                  null is how JsonLine writes NaN and infinities
// Empty objects and arrays give nothing. Throws strata::Error "column C: reason" (C counts bytes
// from 1) when `line` is not one such object.
std::vector<Scalar> json_scalars(std::string_view line);

}  // namespace strata

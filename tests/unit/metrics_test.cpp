// The metrics lines' JSON (train/metrics/metrics.h): JsonLine's values, nested objects and arrays
// as the metrics file and `bench` print them, the comm_bytes object a training line carries, the
// metrics file kept consistent on resume, and the peak resident memory figure.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include "tests/support/test_support.h"
#include "train/metrics/metrics.h"
#include "train/metrics/process_memory.h"

namespace strata {
namespace {

TEST(JsonLine, WritesEachKindOfValue) {
  const std::int64_t step = 42;
  const std::uint64_t bytes = 18446744073709551615ull;  // the largest count a CommStats holds
  const JsonLine line = JsonLine()
                            .add("step", step)
                            .add("layers", 12)
                            .add("bytes", bytes)
                            .add("loss", 0.1)
                            .add("skipped", false)
                            .add("name", std::string("a\"b\\c\n"))
                            .add("literal", "text");
  EXPECT_EQ(line.str(),
            "{\"step\": 42, \"layers\": 12, \"bytes\": 18446744073709551615, "
            "\"loss\": 0.10000000000000001, \"skipped\": false, \"name\": \"a\\\"b\\\\c\\u000a\", "
            "\"literal\": \"text\"}");
}

TEST(JsonLine, NumbersRoundTripUnlessGivenAFormatAndNonFiniteIsNull) {
  const double third = 1.0 / 3.0;
  const JsonLine line = JsonLine()
                            .add("third", third)
                            .add("ms", 12.3456, "%.2f")
                            .add("tflops", 1234567.0, "%.4g")
                            .add("nan", std::nan(""))
                            .add("inf", std::numeric_limits<double>::infinity(), "%.2f");
  EXPECT_EQ(line.str(),
            "{\"third\": 0.33333333333333331, \"ms\": 12.35, \"tflops\": 1.235e+06, "
            "\"nan\": null, \"inf\": null}");
  EXPECT_EQ(std::strtod(json_number(third).c_str(), nullptr), third);
  // A fixed format of a large value is not cut short.
  EXPECT_EQ(json_number(1e300, "%.2f").size(), 304u);
}

TEST(JsonLine, NestsObjectsAndArraysOfNumbers) {
  const std::vector<float> by_stage{1.5f, 0.25f};
  const std::vector<double> none;
  const JsonLine line =
      JsonLine()
          .add("step", 3)
          .add("by_axis", JsonLine().add("tp", 1).add("pp", 0.5, "%.6f").add("dp", JsonLine()))
          .add("by_stage", by_stage, "%.3f")
          .add("exact", std::vector<double>{0.5, 2.0})
          .add("empty", none);
  EXPECT_EQ(line.str(),
            "{\"step\": 3, \"by_axis\": {\"tp\": 1, \"pp\": 0.500000, \"dp\": {}}, "
            "\"by_stage\": [1.500, 0.250], \"exact\": [0.5, 2], \"empty\": []}");
  EXPECT_EQ(json_array(by_stage, "%.1f"), "[1.5, 0.2]");
}

TEST(CommBytesJson, ListsBytesByKindThenLinkClass) {
  CommStats stats;
  stats.add("all_reduce", LinkClass::inter_node, 512);
  stats.add("all_reduce", LinkClass::intra_node, 1024);
  stats.add("send", LinkClass::intra_node, 0);
  stats.count_call("broadcast");  // a call that sent nothing has no bytes entry
  EXPECT_EQ(comm_bytes_json(stats).str(),
            "{\"all_reduce\": {\"intra_node\": 1024, \"inter_node\": 512}, "
            "\"send\": {\"intra_node\": 0}}");
  EXPECT_EQ(comm_bytes_json(CommStats{}).str(), "{}");
  EXPECT_EQ(JsonLine().add("comm_bytes", comm_bytes_json(stats)).str(),
            "{\"comm_bytes\": " + comm_bytes_json(stats).str() + "}");
}

TEST(MetricsWriter, DropsLinesAfterTheResumedStep) {
  testing::TempDir dir("metrics");
  const std::string path = dir / "metrics.jsonl";
  {
    MetricsWriter writer(path, -1);
    for (int step = 1; step <= 4; ++step) writer.write(JsonLine().add("step", step));
  }
  {
    MetricsWriter resumed(path, 2);
    resumed.write(JsonLine().add("step", 3).add("loss", 1.0));
  }
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3, \"loss\": 1}\n");
}

TEST(ProcessMemory, PeakResidentMemoryCountsTouchedPages) {
  EXPECT_GT(peak_rss_mib(), 0);
  std::vector<char> block(std::size_t{64} << 20);
  // Volatile writes, one per page: the compiler may not drop the allocation or the writes.
  volatile char* bytes = block.data();
  for (std::size_t i = 0; i < block.size(); i += 4096) bytes[i] = 1;
  EXPECT_GE(peak_rss_mib(), 64.0);
}

}  // namespace
}  // namespace strata

// Streaming DiLoCo's fragments (train/diloco/diloco_fragments.h): contiguous runs of whole tensors
// in model order, balanced by elements (the embedding alone when it is larger than an even share),
// and the same tensors under every layout, so both pipeline ends sync the tied wte together.
#include "train/diloco/diloco_fragments.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tests/support/partition_support.h"
#include "train/step_report.h"

namespace strata {
namespace {

const GptShape kFortunes{4, 4, 192, 128, 4096};  // configs/fortunes.yaml
const GptShape kGpt2Small{12, 12, 768, 1024, 50257};

double spread(const std::vector<std::size_t>& sizes) {
  const auto [least, most] = std::minmax_element(sizes.begin(), sizes.end());
  return static_cast<double>(*most) / static_cast<double>(*least);
}

TEST(DilocoFragments, AreContiguousRunsOfTensorsInModelOrder) {
  for (int fragments : {1, 2, 3, 4}) {
    const std::vector<int> of = diloco_tensor_fragments(kFortunes, fragments);
    EXPECT_EQ(of.front(), 0);
    EXPECT_EQ(of.back(), fragments - 1);
    for (std::size_t i = 1; i < of.size(); ++i) {
      EXPECT_GE(of[i], of[i - 1]);
      EXPECT_LE(of[i], of[i - 1] + 1);  // no fragment empty
    }
  }
}

TEST(DilocoFragments, HoldAboutAnEvenShareOfTheModelEach) {
  // Whole layers gave the fortunes model's two fragments 4:1 (wte is 1.8 layers); the sizes sum
  // to the model and differ by less than half a block's largest tensor.
  const std::size_t model = ParameterLayout::for_gpt(kFortunes).total();
  for (int fragments : {2, 3, 4}) {
    SCOPED_TRACE(fragments);
    const std::vector<std::size_t> sizes = diloco_fragment_sizes(kFortunes, fragments);
    std::size_t sum = 0;
    for (std::size_t n : sizes) sum += n;
    EXPECT_EQ(sum, model);
    const double largest_tensor = 4.0 * kFortunes.d_model * kFortunes.d_model;
    for (std::size_t n : sizes)
      EXPECT_NEAR(static_cast<double>(n), static_cast<double>(model) / fragments, largest_tensor);
  }
  EXPECT_LT(spread(diloco_fragment_sizes(kFortunes, 2)), 1.1);
}

TEST(DilocoFragments, KeepTheEmbeddingWholeAndShareTheRestEvenly) {
  // GPT-2's wte (38.6M of 124M) exceeds a quarter: fragment 0 is wte alone and the other three
  // share the rest.
  const ParameterLayout whole = ParameterLayout::for_gpt(kGpt2Small);
  const std::vector<std::size_t> sizes = diloco_fragment_sizes(kGpt2Small, 4);
  EXPECT_EQ(sizes[0], whole.at("wte").size);
  EXPECT_LT(spread({sizes[1], sizes[2], sizes[3]}), 1.1);
}

TEST(DilocoFragments, AreTheSameTensorsUnderEveryLayout) {
  const ParameterLayout whole = ParameterLayout::for_gpt(kFortunes);
  const std::vector<int> of = diloco_tensor_fragments(kFortunes, 3);
  for (const auto& stages : std::vector<std::vector<std::pair<int, int>>>{
           {{0, 4}}, {{0, 2}, {2, 4}}, {{0, 1}, {1, 3}, {3, 4}}}) {
    for (int tp_size : {1, 2}) {
      for (int stage = 0; stage < static_cast<int>(stages.size()); ++stage) {
        for (int tp_rank = 0; tp_rank < tp_size; ++tp_rank) {
          const ParameterLayout local = ParameterLayout::for_partition(
              kFortunes, testing::stage_partition(stages, stage, tp_rank, tp_size, false));
          const std::vector<ElementRange> ranges = diloco_fragment_ranges(local, kFortunes, 3);
          // Each local tensor lies in its logical tensor's fragment and in no other.
          for (const TensorView& t : local.tensors()) {
            const auto logical =
                std::find_if(whole.tensors().begin(), whole.tensors().end(),
                             [&](const TensorView& w) { return w.name == t.name; });
            const int expected = of[static_cast<std::size_t>(logical - whole.tensors().begin())];
            for (int f = 0; f < 3; ++f) {
              const ElementRange part =
                  intersect(ranges[static_cast<std::size_t>(f)], {t.offset, t.offset + t.size});
              EXPECT_EQ(part.size(), f == expected ? t.size : 0) << t.name << " fragment " << f;
            }
          }
          // The tied wte, on the first and the last stage alike, is in fragment 0.
          if (local.has("wte")) {
            EXPECT_EQ(ranges[0].begin, local.at("wte").offset);
          }
        }
      }
    }
  }
}

TEST(HumanUnits, ScaleToThreeDigitsWithoutExponents) {
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(1023), "1023 B");
  EXPECT_EQ(human_bytes(633712), "619 KiB");
  EXPECT_EQ(human_bytes(1.5 * 1048576), "1.50 MiB");
  EXPECT_EQ(human_bytes(1023.9 * 1048576), "1024 MiB");
  EXPECT_EQ(human_count(812), "812");
  EXPECT_EQ(human_count(52400), "52.4k");
  EXPECT_EQ(human_count(124439808), "124M");
}

}  // namespace
}  // namespace strata

#include "train/diloco/diloco_fragments.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "model/core/error.h"

namespace strata {

std::vector<int> diloco_tensor_fragments(const GptShape& shape, int fragments) {
  const ParameterLayout whole = ParameterLayout::for_gpt(shape);
  const std::vector<TensorView>& tensors = whole.tensors();
  const std::size_t count = tensors.size();
  STRATA_CHECK(fragments >= 1 && static_cast<std::size_t>(fragments) <= count,
               "DiLoCo: ", fragments, " fragments of a model of ", count, " tensors");
  // prefix[i]: the elements of tensors [0, i).
  std::vector<double> prefix(count + 1, 0.0);
  for (std::size_t i = 0; i < count; ++i)
    prefix[i + 1] = prefix[i] + static_cast<double>(tensors[i].size);
  std::vector<int> fragment_of(count, fragments - 1);
  std::size_t begin = 0;  // first tensor of fragment k
  for (int k = 0; k + 1 < fragments; ++k) {
    const double target =
        prefix[begin] + (prefix[count] - prefix[begin]) / static_cast<double>(fragments - k);
    // One tensor at least, and one left for each later fragment.
    const std::size_t last_end = count - static_cast<std::size_t>(fragments - k - 1);
    std::size_t end = begin + 1;
    for (std::size_t e = begin + 2; e <= last_end; ++e)
      if (std::abs(prefix[e] - target) < std::abs(prefix[end] - target)) end = e;
    std::fill(fragment_of.begin() + static_cast<std::ptrdiff_t>(begin),
              fragment_of.begin() + static_cast<std::ptrdiff_t>(end), k);
    begin = end;
  }
  return fragment_of;
}

std::vector<std::size_t> diloco_fragment_sizes(const GptShape& shape, int fragments) {
  const ParameterLayout whole = ParameterLayout::for_gpt(shape);
  const std::vector<TensorView>& tensors = whole.tensors();
  const std::vector<int> fragment_of = diloco_tensor_fragments(shape, fragments);
  std::vector<std::size_t> sizes(static_cast<std::size_t>(fragments), 0);
  for (std::size_t i = 0; i < tensors.size(); ++i)
    sizes[static_cast<std::size_t>(fragment_of[i])] += tensors[i].size;
  return sizes;
}

std::vector<ElementRange> diloco_fragment_ranges(const ParameterLayout& local,
                                                 const GptShape& shape, int fragments) {
  const ParameterLayout whole = ParameterLayout::for_gpt(shape);
  const std::vector<TensorView>& logical = whole.tensors();
  const std::vector<int> fragment_of = diloco_tensor_fragments(shape, fragments);
  std::map<std::string, int> by_name;
  for (std::size_t i = 0; i < logical.size(); ++i) by_name[logical[i].name] = fragment_of[i];
  std::vector<ElementRange> ranges(static_cast<std::size_t>(fragments), ElementRange{0, 0});
  for (const TensorView& t : local.tensors()) {
    const auto found = by_name.find(t.name);
    STRATA_CHECK(found != by_name.end(), "DiLoCo: tensor '", t.name, "' is not in the model");
    ElementRange& r = ranges[static_cast<std::size_t>(found->second)];
    const ElementRange tensor{t.offset, t.offset + t.size};
    r = r.empty() ? tensor
                  : ElementRange{std::min(r.begin, tensor.begin), std::max(r.end, tensor.end)};
  }
  // Model order kept: the spans follow each other without overlap.
  std::size_t end = 0;
  for (const ElementRange& r : ranges) {
    if (r.empty()) continue;
    STRATA_CHECK(r.begin >= end, "DiLoCo: fragments overlap in this rank's layout");
    end = r.end;
  }
  return ranges;
}

}  // namespace strata

// tensor_parts (train/optimizer/tensor_parts.h).
#include "train/optimizer/tensor_parts.h"

namespace strata {

std::vector<TensorPart> tensor_parts(const ParameterLayout& layout, ElementRange range,
                                     TensorOrder order) {
  // The section a tensor belongs to in `order`.
  const auto section = [order](const TensorView& t) {
    const bool split = !t.slice.is_whole();
    switch (order) {
      case TensorOrder::layout:
        return 0;
      case TensorOrder::whole_first:
        return split ? 1 : 0;
      case TensorOrder::wte_whole_split:
        return t.name == "wte" ? 0 : split ? 2 : 1;
    }
    return 0;
  };
  std::vector<TensorPart> parts;
  for (int pass = 0; pass < 3; ++pass)
    for (const TensorView& t : layout.tensors()) {
      if (section(t) != pass) continue;
      const ElementRange elements{t.offset, t.offset + t.size};
      parts.push_back({&t, elements, intersect(elements, range), !t.slice.is_whole()});
    }
  return parts;
}

}  // namespace strata

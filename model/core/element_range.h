// A contiguous range [begin, end) of element indices of a flat buffer (docs/ARCHITECTURE.md §2:
// parameters, gradients and optimizer state live in flat buffers; a rank owns element ranges of
// them, plans reduce ranges, checkpoints are written as slabs of ranges). Plain data, usable on the
// device.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace strata {

struct ElementRange {
  std::size_t begin = 0;
  std::size_t end = 0;

  std::size_t size() const { return end > begin ? end - begin : 0; }
  bool empty() const { return end <= begin; }
  bool contains(std::size_t index) const { return begin <= index && index < end; }
  bool operator==(const ElementRange&) const = default;
};

// The elements in both (empty when they do not meet; begin == end then).
inline ElementRange intersect(const ElementRange& a, const ElementRange& b) {
  const std::size_t begin = std::max(a.begin, b.begin), end = std::min(a.end, b.end);
  return end > begin ? ElementRange{begin, end} : ElementRange{begin, begin};
}

// The parts of sorted, disjoint `ranges` inside `window`, shifted so that window.begin is 0: the
// same ranges as seen by a buffer that holds only the window.
inline std::vector<ElementRange> restrict_to(const std::vector<ElementRange>& ranges,
                                             const ElementRange& window) {
  std::vector<ElementRange> out;
  for (const ElementRange& r : ranges) {
    const ElementRange part = intersect(r, window);
    if (!part.empty()) out.push_back({part.begin - window.begin, part.end - window.begin});
  }
  return out;
}

// Appends `r` to sorted ranges, merging it with the last one when they touch.
inline void append_merged(std::vector<ElementRange>& ranges, const ElementRange& r) {
  if (r.empty()) return;
  if (!ranges.empty() && ranges.back().end == r.begin)
    ranges.back().end = r.end;
  else
    ranges.push_back(r);
}

}  // namespace strata

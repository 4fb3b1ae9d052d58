#include "train/backend/backend_state.h"

#include "model/core/error.h"

namespace strata {

std::vector<StateBuffer> state_buffers(ElementRange parameters, ElementRange owned,
                                       const std::vector<std::string>& moments) {
  std::vector<StateBuffer> buffers{{"model", parameters, {}}};
  for (const std::string& moment : moments) buffers.push_back({"optimizer/" + moment, owned, {}});
  return buffers;
}

std::size_t match_state_buffer(const std::vector<StateBuffer>& held, const StateBuffer& given,
                               std::string_view backend) {
  for (std::size_t i = 0; i < held.size(); ++i)
    if (held[i].name == given.name && held[i].range == given.range &&
        given.values.size() == given.range.size())
      return i;
  fail("state buffer '", given.name, "' does not fit the ", backend, " backend");
}

WindowPart window_part(ElementRange range, ElementRange held) {
  const ElementRange both = intersect(range, held);
  if (both.empty()) return {};
  return {both.begin - held.begin, both.begin - range.begin, both.size()};
}

}  // namespace strata

#include "train/backend/backend_state.h"

#include "model/core/error.h"

namespace strata {

std::vector<StateBuffer> state_buffers(ElementRange parameters, ElementRange owned,
                                       const std::vector<std::string>& moments) {
  std::vector<StateBuffer> buffers{{"model", parameters, {}}};
  for (const std::string& moment : moments)
    buffers.push_back({kOptimizerPrefix + moment, owned, {}});
  return buffers;
}

std::vector<StateBuffer> state_buffers(ElementRange parameters,
                                       const std::vector<StateBuffer>& optimizer) {
  std::vector<StateBuffer> buffers{{"model", parameters, {}}};
  for (StateBuffer b : optimizer) {
    b.name = kOptimizerPrefix + b.name;
    buffers.push_back(std::move(b));
  }
  return buffers;
}

namespace {
// The number of values a buffer shaped like `b` holds.
std::size_t value_count(const StateBuffer& b) {
  if (!b.per_tensor) return b.range.size();
  std::size_t n = 0;
  for (const TensorStatistic& s : b.statistics) n += static_cast<std::size_t>(s.size);
  return n;
}
}  // namespace

std::size_t match_state_buffer(const std::vector<StateBuffer>& held, const StateBuffer& given,
                               std::string_view backend) {
  for (std::size_t i = 0; i < held.size(); ++i)
    if (held[i].name == given.name && held[i].range == given.range &&
        held[i].per_tensor == given.per_tensor && held[i].statistics == given.statistics &&
        given.values.size() == value_count(given))
      return i;
  fail("state buffer '", given.name, "' does not fit the ", backend, " backend");
}

std::optional<StateBuffer> fp8_history_buffer(const std::vector<Fp8State*>& states,
                                              const ParameterLayout& layout) {
  StateBuffer buffer{kFp8HistoryBuffer, {}, {}, true};
  buffer.optional = true;
  bool delayed = false;  // then every rank holds the buffer, even one with no FP8 GEMM
  for (const Fp8State* state : states) {
    if (state == nullptr) continue;
    delayed = delayed || state->settings().scaling == Fp8Scaling::delayed;
    const std::vector<float> values = state->histories();
    const std::vector<std::string> tensors = state->history_tensors(layout);
    if (tensors.empty()) continue;
    for (const std::string& t : tensors)
      buffer.statistics.push_back({t, static_cast<std::int64_t>(values.size() / tensors.size())});
    buffer.values.insert(buffer.values.end(), values.begin(), values.end());
  }
  if (!delayed) return std::nullopt;
  return buffer;
}

void set_fp8_histories(const std::vector<Fp8State*>& states, const StateBuffer& buffer) {
  std::size_t at = 0;
  for (Fp8State* state : states) {
    if (state == nullptr) continue;
    const std::size_t n = state->histories().size();
    STRATA_CHECK(at + n <= buffer.values.size(), "FP8 amax histories: too few values");
    state->set_histories(std::span<const float>(buffer.values).subspan(at, n));
    at += n;
  }
  STRATA_CHECK(at == buffer.values.size(), "FP8 amax histories: ", buffer.values.size(),
               " values for ", at);
}

WindowPart window_part(ElementRange range, ElementRange held) {
  const ElementRange both = intersect(range, held);
  if (both.empty()) return {};
  return {both.begin - held.begin, both.begin - range.begin, both.size()};
}

}  // namespace strata

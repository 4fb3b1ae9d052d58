#include "model/moe/moe_exchange.h"

#include <algorithm>
#include <cstdint>

#include "model/core/error.h"

namespace strata {

std::size_t MoeExchange::rows_sent() const {
  std::size_t rows = 0;
  for (std::size_t r : sent_rows) rows += r;
  return rows;
}

std::size_t MoeExchange::rows_to_others(int self) const {
  std::size_t rows = 0;
  for (int m = 0; m < members; ++m)
    if (m != self) rows += sent_rows[static_cast<std::size_t>(m)];
  return rows;
}

std::size_t MoeExchange::rows_from_others(int self) const {
  std::size_t rows = 0;
  for (int m = 0; m < members; ++m)
    if (m != self) rows += received_rows[static_cast<std::size_t>(m)];
  return rows;
}

MoeExchange plan_moe_exchange(const MoeRouting& routing, Collectives& group) {
  const int P = group.size(), E = routing.experts;
  STRATA_CHECK(E % P == 0, "expert parallelism of ", P, " does not divide ", E, " experts");
  const int El = E / P;
  MoeExchange x;
  x.members = P;
  x.experts_per_member = El;
  // Counts: this rank's assignments per expert, member m's chunk its experts'.
  std::vector<std::int32_t> sent(static_cast<std::size_t>(E)), received(sent.size());
  for (int e = 0; e < E; ++e) sent[static_cast<std::size_t>(e)] = routing.assigned(e);
  const std::vector<std::size_t> chunk(static_cast<std::size_t>(P), static_cast<std::size_t>(El));
  group.all_to_all_v(sent.data(), std::span<const std::size_t>(chunk), received.data(),
                     std::span<const std::size_t>(chunk));
  auto count = [&](int member, int j) {
    return static_cast<std::size_t>(received[static_cast<std::size_t>(member * El + j)]);
  };
  x.sent_rows.assign(static_cast<std::size_t>(P), 0);
  x.received_rows.assign(static_cast<std::size_t>(P), 0);
  for (int m = 0; m < P; ++m)
    for (int j = 0; j < El; ++j) {
      x.sent_rows[static_cast<std::size_t>(m)] +=
          static_cast<std::size_t>(routing.assigned(m * El + j));
      x.received_rows[static_cast<std::size_t>(m)] += count(m, j);
    }
  // Where each member's block starts among the received rows (member-major), then the
  // expert-major order over them.
  std::vector<std::size_t> block(static_cast<std::size_t>(P) + 1, 0);
  for (int m = 0; m < P; ++m)
    block[static_cast<std::size_t>(m) + 1] =
        block[static_cast<std::size_t>(m)] + x.received_rows[static_cast<std::size_t>(m)];
  x.expert_offsets.assign(static_cast<std::size_t>(El) + 1, 0);
  x.order.clear();
  x.order.reserve(block.back());
  std::vector<std::size_t> within(static_cast<std::size_t>(P), 0);  // rows of earlier experts
  for (int j = 0; j < El; ++j) {
    for (int m = 0; m < P; ++m) {
      const std::size_t first =
          block[static_cast<std::size_t>(m)] + within[static_cast<std::size_t>(m)];
      for (std::size_t r = 0; r < count(m, j); ++r) x.order.push_back(static_cast<int>(first + r));
      within[static_cast<std::size_t>(m)] += count(m, j);
    }
    x.expert_offsets[static_cast<std::size_t>(j) + 1] = static_cast<int>(x.order.size());
  }
  return x;
}

namespace {
std::vector<std::size_t> elements(const std::vector<std::size_t>& rows, int width) {
  std::vector<std::size_t> counts(rows.size());
  for (std::size_t m = 0; m < rows.size(); ++m)
    counts[m] = rows[m] * static_cast<std::size_t>(width);
  return counts;
}

}  // namespace

template <class T>
void moe_dispatch(const MoeExchange& x, Collectives& group, const T* rows, int width,
                  T* expert_rows) {
  const std::size_t R = x.order.size(), w = static_cast<std::size_t>(width);
  const std::vector<std::size_t> sent = elements(x.sent_rows, width);
  const std::vector<std::size_t> received = elements(x.received_rows, width);
  if (x.members == 1) {  // member-major is expert-major
    group.all_to_all_v(rows, std::span<const std::size_t>(sent), expert_rows,
                       std::span<const std::size_t>(received));
    return;
  }
  std::vector<T> arrived(R * w);
  group.all_to_all_v(rows, std::span<const std::size_t>(sent), arrived.data(),
                     std::span<const std::size_t>(received));
  for (std::size_t i = 0; i < R; ++i)
    std::copy_n(arrived.data() + static_cast<std::size_t>(x.order[i]) * w, w, expert_rows + i * w);
}

template <class T>
void moe_dispatch(const MoeExchange& x, Collectives& group, const T* rows, int width,
                  std::vector<T>& expert_rows) {
  const std::size_t R = x.order.size(), w = static_cast<std::size_t>(width);
  if (expert_rows.size() < R * w) expert_rows.resize(R * w);
  moe_dispatch(x, group, rows, width, expert_rows.data());
}

template <class T>
void moe_combine(const MoeExchange& x, Collectives& group, const T* expert_rows, int width,
                 T* rows) {
  const std::size_t R = x.order.size(), w = static_cast<std::size_t>(width);
  const std::vector<std::size_t> back = elements(x.received_rows, width);
  const std::vector<std::size_t> home = elements(x.sent_rows, width);
  if (x.members == 1) {
    group.all_to_all_v(expert_rows, std::span<const std::size_t>(back), rows,
                       std::span<const std::size_t>(home));
    return;
  }
  std::vector<T> leaving(R * w);
  for (std::size_t i = 0; i < R; ++i)
    std::copy_n(expert_rows + i * w, w, leaving.data() + static_cast<std::size_t>(x.order[i]) * w);
  group.all_to_all_v(leaving.data(), std::span<const std::size_t>(back), rows,
                     std::span<const std::size_t>(home));
}

template <class T>
void moe_combine(const MoeExchange& x, Collectives& group, const T* expert_rows, int width,
                 std::vector<T>& rows) {
  const std::size_t A = x.rows_sent(), w = static_cast<std::size_t>(width);
  if (rows.size() < A * w) rows.resize(A * w);
  moe_combine(x, group, expert_rows, width, rows.data());
}

#define STRATA_MOE_EXCHANGE(T)                                                                     \
  template void moe_dispatch<T>(const MoeExchange&, Collectives&, const T*, int, std::vector<T>&); \
  template void moe_combine<T>(const MoeExchange&, Collectives&, const T*, int, std::vector<T>&);  \
  template void moe_dispatch<T>(const MoeExchange&, Collectives&, const T*, int, T*);              \
  template void moe_combine<T>(const MoeExchange&, Collectives&, const T*, int, T*);
STRATA_MOE_EXCHANGE(float)
STRATA_MOE_EXCHANGE(double)
STRATA_MOE_EXCHANGE(std::uint8_t)
#undef STRATA_MOE_EXCHANGE

}  // namespace strata

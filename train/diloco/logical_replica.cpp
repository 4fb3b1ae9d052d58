#include "train/diloco/logical_replica.h"

#include <algorithm>
#include <utility>

#include "model/core/error.h"

namespace strata {

std::vector<LogicalReplica::Run> logical_runs(const ParameterLayout& layout,
                                              const ParameterLayout& logical,
                                              const std::vector<ElementRange>& ranges) {
  std::vector<LogicalReplica::Run> runs;
  for (const TensorView& t : layout.tensors()) {
    const std::size_t first = logical.at(t.name).offset;
    const auto block = static_cast<std::size_t>(t.slice.mid_count * t.slice.inner);
    for (const ElementRange& r : ranges) {
      const ElementRange part = intersect(r, {t.offset, t.offset + t.size});
      // A slice's local elements are blocks of mid_count · inner consecutive logical ones.
      for (std::size_t e = part.begin; e < part.end;) {
        const std::size_t local = e - t.offset;
        const std::size_t count = std::min(block - local % block, part.end - e);
        const std::size_t at = first + static_cast<std::size_t>(
                                           t.slice.logical_index(static_cast<std::int64_t>(local)));
        if (!runs.empty() && runs.back().local + runs.back().count == e &&
            runs.back().logical + runs.back().count == at)
          runs.back().count += count;
        else
          runs.push_back({e, at, count});
        e += count;
      }
    }
  }
  return runs;
}

namespace {

std::size_t total_count(const std::vector<LogicalReplica::Run>& runs) {
  std::size_t n = 0;
  for (const LogicalReplica::Run& r : runs) n += r.count;
  return n;
}

}  // namespace

LogicalReplica::LogicalReplica(const ParameterLayout& layout, const GptShape& shape,
                               const std::vector<ElementRange>& writes, ElementRange held,
                               Collectives& job)
    : logical_(ParameterLayout::for_gpt(shape)), held_(held), job_(job) {
  write_runs_ = logical_runs(layout, logical_, writes);
  held_runs_ = logical_runs(layout, logical_, {intersect(held, {0, layout.total()})});
  if (!write_runs_.empty())
    write_hull_ = {write_runs_.front().local, write_runs_.back().local + write_runs_.back().count};
  STRATA_CHECK(
      write_runs_.empty() || (write_hull_.begin >= held.begin && write_hull_.end <= held.end),
      "logical replica: this rank writes elements it does not hold");
  every_write_runs_ = runs_on_leader(write_runs_);
  every_held_runs_ = runs_on_leader(held_runs_);
  if (leads()) {
    std::size_t written = 0;
    for (const std::vector<Run>& runs : every_write_runs_) written += total_count(runs);
    STRATA_CHECK(written == logical_.total(), "logical replica: the job writes ", written,
                 " elements of a model of ", logical_.total());
    copy_.assign(logical_.total(), 0.0f);
  }
}

std::vector<std::vector<LogicalReplica::Run>> LogicalReplica::runs_on_leader(
    const std::vector<Run>& mine) {
  const auto ranks = static_cast<std::size_t>(job_.size());
  std::int64_t count = static_cast<std::int64_t>(mine.size());
  std::vector<std::int64_t> counts(ranks);
  job_.all_gather(&count, counts.data(), 1);
  std::vector<std::int64_t> sent;
  for (const Run& r : mine) {
    sent.push_back(static_cast<std::int64_t>(r.logical));
    sent.push_back(static_cast<std::int64_t>(r.count));
  }
  std::vector<std::size_t> send_counts(ranks, 0), recv_counts(ranks, 0);
  send_counts[0] = sent.size();
  std::size_t received = 0;
  if (leads())
    for (std::size_t r = 0; r < ranks; ++r) {
      recv_counts[r] = 2 * static_cast<std::size_t>(counts[r]);
      received += recv_counts[r];
    }
  std::vector<std::int64_t> all(received);
  job_.all_to_all_v(sent.data(), send_counts, all.data(), recv_counts);
  std::vector<std::vector<Run>> every;
  if (!leads()) return every;
  const std::int64_t* p = all.data();
  for (std::size_t r = 0; r < ranks; ++r) {
    std::vector<Run>& runs = every.emplace_back();
    for (std::int64_t i = 0; i < counts[r]; ++i, p += 2)
      runs.push_back({0, static_cast<std::size_t>(p[0]), static_cast<std::size_t>(p[1])});
  }
  return every;
}

void LogicalReplica::read_master_weights(ElementRange range, float* out) {
  STRATA_CHECK(leads(), "logical replica: only rank 0 holds the logical model");
  std::fill_n(out, range.size(), 0.0f);
  const ElementRange part = intersect(range, {0, copy_.size()});
  if (!part.empty())
    std::copy(copy_.begin() + static_cast<std::ptrdiff_t>(part.begin),
              copy_.begin() + static_cast<std::ptrdiff_t>(part.end),
              out + (part.begin - range.begin));
}

void LogicalReplica::write_master_weights(ElementRange range, const float* in) {
  STRATA_CHECK(leads(), "logical replica: only rank 0 holds the logical model");
  const ElementRange part = intersect(range, {0, copy_.size()});
  if (!part.empty())
    std::copy_n(in + (part.begin - range.begin), part.size(),
                copy_.begin() + static_cast<std::ptrdiff_t>(part.begin));
}

std::vector<float> LogicalReplica::gather(const float* values, ElementRange range) {
  STRATA_CHECK(
      write_runs_.empty() || (write_hull_.begin >= range.begin && write_hull_.end <= range.end),
      "logical replica: the values do not cover this rank's writes");
  const auto ranks = static_cast<std::size_t>(job_.size());
  std::vector<float> sent;
  sent.reserve(total_count(write_runs_));
  for (const Run& r : write_runs_) {
    const float* v = values + (r.local - range.begin);
    sent.insert(sent.end(), v, v + r.count);
  }
  std::vector<std::size_t> send_counts(ranks, 0), recv_counts(ranks, 0);
  send_counts[0] = sent.size();
  if (leads())
    for (std::size_t r = 0; r < ranks; ++r) recv_counts[r] = total_count(every_write_runs_[r]);
  std::vector<float> received(leads() ? logical_.total() : 0);
  job_.all_to_all_v(sent.data(), send_counts, received.data(), recv_counts);
  if (!leads()) return {};
  std::vector<float> model(logical_.total(), 0.0f);
  const float* p = received.data();
  for (const std::vector<Run>& runs : every_write_runs_)
    for (const Run& r : runs) {
      std::copy_n(p, r.count, model.begin() + static_cast<std::ptrdiff_t>(r.logical));
      p += r.count;
    }
  return model;
}

std::vector<float> LogicalReplica::scatter(const std::vector<float>& logical) {
  const auto ranks = static_cast<std::size_t>(job_.size());
  std::vector<float> sent;
  std::vector<std::size_t> send_counts(ranks, 0), recv_counts(ranks, 0);
  if (leads()) {
    STRATA_CHECK(logical.size() == logical_.total(), "logical replica: scattering ", logical.size(),
                 " elements of a model of ", logical_.total());
    for (std::size_t rank = 0; rank < ranks; ++rank) {
      for (const Run& r : every_held_runs_[rank]) {
        const auto at = logical.begin() + static_cast<std::ptrdiff_t>(r.logical);
        sent.insert(sent.end(), at, at + static_cast<std::ptrdiff_t>(r.count));
      }
      send_counts[rank] = total_count(every_held_runs_[rank]);
    }
  }
  recv_counts[0] = total_count(held_runs_);
  std::vector<float> received(recv_counts[0]);
  job_.all_to_all_v(sent.data(), send_counts, received.data(), recv_counts);
  std::vector<float> values(held_.size(), 0.0f);
  const float* p = received.data();
  for (const Run& r : held_runs_) {
    std::copy_n(p, r.count, values.begin() + static_cast<std::ptrdiff_t>(r.local - held_.begin));
    p += r.count;
  }
  return values;
}

std::int64_t LogicalReplica::from_leader(std::int64_t value) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(job_.size()));
  job_.all_gather(&value, all.data(), 1);
  return all[0];
}

void LogicalReplica::pull(MasterWeights& local) {
  std::vector<float> values(write_hull_.size());
  if (!values.empty()) local.read_master_weights(write_hull_, values.data());
  std::vector<float> model = gather(values.data(), write_hull_);
  if (leads()) copy_ = std::move(model);
}

void LogicalReplica::push(MasterWeights& local) {
  const std::vector<float> values = scatter(copy_);
  if (!held_.empty()) local.write_master_weights(held_, values.data());
}

std::vector<StateBuffer> LogicalReplica::to_layout(std::vector<StateBuffer> logical,
                                                   ElementRange share) {
  STRATA_CHECK(share.begin >= held_.begin && share.end <= held_.end,
               "logical replica: the share lies outside the elements held");
  for (StateBuffer& b : logical) {
    const std::vector<float> held = scatter(b.values);
    const auto from = held.begin() + static_cast<std::ptrdiff_t>(share.begin - held_.begin);
    b.values.assign(from, from + static_cast<std::ptrdiff_t>(share.size()));
    b.range = share;
  }
  return logical;
}

std::vector<StateBuffer> LogicalReplica::to_logical(std::vector<StateBuffer> local,
                                                    ElementRange share) {
  for (StateBuffer& b : local) {
    STRATA_CHECK(b.range == share && b.values.size() == share.size(), "logical replica: buffer '",
                 b.name, "' is not over this rank's share");
    b.values = gather(b.values.data(), share);
    b.range = leads() ? ElementRange{0, logical_.total()} : ElementRange{0, 0};
  }
  return local;
}

}  // namespace strata

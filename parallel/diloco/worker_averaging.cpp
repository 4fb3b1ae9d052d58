#include "parallel/diloco/worker_averaging.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

#include "model/core/counter_rng.h"
#include "model/core/error.h"

namespace strata {

Averaging averaging_from_name(const std::string& name) {
  if (const auto averaging = kAveragingChoices.find(name)) return *averaging;
  fail("unknown diloco.averaging '", name, "' (expected ", kAveragingChoices.list(), ")");
}

std::vector<bool> dropped_workers(std::uint64_t seed, std::int64_t round, int workers, double p) {
  std::vector<bool> dropped(static_cast<std::size_t>(workers), false);
  const std::uint64_t key =
      hash_combine(hash_combine(seed, hash_name("diloco/drop")), static_cast<std::uint64_t>(round));
  for (int w = 0; w < workers; ++w)
    dropped[static_cast<std::size_t>(w)] =
        p > 0 && uniform_open01(hash_combine(key, static_cast<std::uint64_t>(w))) < p;
  return dropped;
}

namespace {

bool is_dropped(const AveragingRound& round, int worker) {
  return !round.dropped.empty() && round.dropped.at(static_cast<std::size_t>(worker));
}

bool is_excluded(const AveragingRound& round, int worker) {
  return !round.excluded.empty() && round.excluded.at(static_cast<std::size_t>(worker));
}

// Whether the worker's vector enters the averages: neither dropped nor excluded.
bool contributes(const AveragingRound& round, int worker) {
  return !is_dropped(round, worker) && !is_excluded(round, worker);
}

int contributing_workers(const AveragingRound& round, int workers) {
  int live = 0;
  for (int w = 0; w < workers; ++w) live += contributes(round, w);
  return live;
}

bool gathers(Averaging algorithm, const AveragingRound& round) {
  return algorithm == Averaging::all_reduce && round.aggregation.rule != AggregationRule::mean;
}

std::uint64_t sum_of(std::span<const std::size_t> sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), std::uint64_t{0});
}

// Chunk o of a vector of `count` cut into k: [o·c, min(count, (o+1)·c)), c = ⌈count / k⌉.
std::vector<std::size_t> chunk_counts(std::size_t count, int k) {
  const std::size_t c = (count + static_cast<std::size_t>(k) - 1) / static_cast<std::size_t>(k);
  std::vector<std::size_t> counts;
  for (int o = 0; o < k; ++o) {
    const std::size_t begin = std::min(count, static_cast<std::size_t>(o) * c);
    counts.push_back(std::min(c, count - begin));
  }
  return counts;
}

// compress(x + residual) into out (compressed_bytes(count, format)); residual, when given, keeps
// what the round trip lost: (x + residual) − decompress(out).
void compress_contribution(const float* x, float* residual, std::size_t count,
                           OuterCompression format, std::uint8_t* out) {
  if (residual == nullptr) {
    compress(x, count, format, out);
    return;
  }
  std::vector<float> corrected(count), round_trip(count, 0.0f);
  for (std::size_t i = 0; i < count; ++i) corrected[i] = x[i] + residual[i];
  compress(corrected.data(), count, format, out);
  decompress_add(out, count, format, round_trip.data());
  for (std::size_t i = 0; i < count; ++i) residual[i] = corrected[i] - round_trip[i];
}

// The scatter–gather of all_reduce (compressed) and butterfly, as the byte sizes of its payloads,
// a pure function of the round that every worker computes alike: no sizes travel.
struct ScatterGather {
  std::vector<std::size_t> chunks;    // values per chunk, chunk o owned by worker o
  std::vector<std::size_t> offsets;   // first value of each chunk
  std::vector<std::size_t> sends;     // bytes to each owner (this worker's chunk o)
  std::vector<std::size_t> receives;  // bytes from each peer (its copy of this owner's chunk)
  std::vector<std::size_t> averages;  // bytes of each owner's compressed average (all-gather)
  int live = 0;                       // the contributing workers, whose chunks owners sum
};

// dropped_owners_average: all_reduce (an owner averages whether or not it dropped) rather than
// butterfly (a dropped owner is left out).
ScatterGather scatter_gather_plan(std::size_t count, int k, int me, const AveragingRound& round,
                                  OuterCompression format, bool dropped_owners_average) {
  ScatterGather plan;
  plan.chunks = chunk_counts(count, k);
  plan.live = contributing_workers(round, k);
  auto acts = [&](int o) { return dropped_owners_average || !is_dropped(round, o); };
  const bool live = contributes(round, me);
  std::size_t at = 0;
  for (int o = 0; o < k; ++o) {
    const std::size_t bytes = compressed_bytes(plan.chunks[static_cast<std::size_t>(o)], format);
    plan.offsets.push_back(at);
    at += plan.chunks[static_cast<std::size_t>(o)];
    plan.sends.push_back(live && acts(o) ? bytes : 0);
    plan.averages.push_back(acts(o) ? bytes : 0);
  }
  const std::size_t mine = compressed_bytes(plan.chunks[static_cast<std::size_t>(me)], format);
  for (int q = 0; q < k; ++q) plan.receives.push_back(acts(me) && contributes(round, q) ? mine : 0);
  return plan;
}

void all_reduce_mean(Communicator& group, float* values, std::size_t count,
                     const AveragingRound& round, float* residual) {
  const bool live = contributes(round, group.rank());
  std::vector<float> sum(count, 0.0f);
  if (live) {
    std::copy_n(values, count, sum.data());
    if (residual != nullptr) {  // fp32 travels exactly: the residual is sent whole
      for (std::size_t i = 0; i < count; ++i) sum[i] += residual[i];
      std::fill_n(residual, count, 0.0f);
    }
  }
  group.all_reduce_sum(sum.data(), sum.size());
  if (is_dropped(round, group.rank())) return;
  const auto live_count = static_cast<float>(contributing_workers(round, group.size()));
  for (std::size_t i = 0; i < count; ++i) values[i] = sum[i] / live_count;
}

void scatter_gather(Communicator& group, float* values, std::size_t count,
                    const AveragingRound& round, OuterCompression format, float* residual,
                    bool dropped_owners_average) {
  const int k = group.size(), me = group.rank();
  const auto mine = static_cast<std::size_t>(me);
  const ScatterGather plan =
      scatter_gather_plan(count, k, me, round, format, dropped_owners_average);
  // Scatter: to each acting owner its chunk of this worker's contribution, compressed.
  std::vector<std::uint8_t> sent(sum_of(plan.sends)), received(sum_of(plan.receives));
  std::size_t at = 0;
  for (std::size_t o = 0; o < plan.chunks.size(); ++o) {
    if (plan.sends[o] == 0) continue;
    compress_contribution(values + plan.offsets[o],
                          residual == nullptr ? nullptr : residual + plan.offsets[o],
                          plan.chunks[o], format, sent.data() + at);
    at += plan.sends[o];
  }
  group.all_to_all_v(sent.data(), plan.sends, received.data(), plan.receives);
  // The owner's average over the live workers' chunks, in worker order; then compressed.
  std::vector<float> average(plan.chunks[mine], 0.0f);
  at = 0;
  for (std::size_t bytes : plan.receives) {
    if (bytes == 0) continue;
    decompress_add(received.data() + at, average.size(), format, average.data());
    at += bytes;
  }
  for (float& a : average) a /= static_cast<float>(plan.live);
  std::vector<std::uint8_t> own_average(plan.averages[mine]), averages(sum_of(plan.averages));
  if (!own_average.empty()) compress(average.data(), average.size(), format, own_average.data());
  group.all_gather_v(own_average.data(), averages.data(), plan.averages);
  if (is_dropped(round, me)) return;  // a dropped worker keeps its own vector
  at = 0;
  for (std::size_t o = 0; o < plan.chunks.size(); ++o) {
    if (plan.averages[o] == 0) continue;  // a dropped owner's chunk stays local
    float* chunk = values + plan.offsets[o];
    std::fill_n(chunk, plan.chunks[o], 0.0f);
    decompress_add(averages.data() + at, plan.chunks[o], format, chunk);
    at += plan.averages[o];
  }
}

int gossip_partner(const AveragingRound& round, int workers, int worker) {
  return gossip_partners(round.seed, round.round, workers)[static_cast<std::size_t>(worker)];
}

void gossip(Communicator& group, float* values, std::size_t count, const AveragingRound& round,
            OuterCompression format, float* residual) {
  const int me = group.rank(), partner = gossip_partner(round, group.size(), me);
  if (partner == me || is_dropped(round, me) || is_dropped(round, partner)) return;
  const std::size_t bytes = compressed_bytes(count, format);
  std::vector<std::uint8_t> mine(bytes), theirs(bytes);
  compress_contribution(values, residual, count, format, mine.data());
  group.send_recv(mine.data(), bytes, partner, theirs.data(), bytes, partner);
  if (is_excluded(round, me) != is_excluded(round, partner)) {
    if (is_excluded(round, me)) {  // takes the partner's round trip; the partner keeps its own
      std::fill_n(values, count, 0.0f);
      decompress_add(theirs.data(), count, format, values);
    }
    return;
  }
  if (is_excluded(round, me)) return;  // both excluded: both keep their own
  // The lower worker's round trip first, at both ends: the pair ends bitwise equal.
  std::fill_n(values, count, 0.0f);
  decompress_add((me < partner ? mine : theirs).data(), count, format, values);
  decompress_add((me < partner ? theirs : mine).data(), count, format, values);
  for (std::size_t i = 0; i < count; ++i) values[i] *= 0.5f;
}

// The live members of w's moshpit group in `round`, ascending.
std::vector<int> live_moshpit_members(int worker, int workers, const AveragingRound& round) {
  std::vector<int> members = moshpit_group(worker, workers, round.moshpit_group_size, round.round);
  std::erase_if(members, [&](int m) { return is_dropped(round, m); });
  return members;
}

void moshpit(Communicator& group, float* values, std::size_t count, const AveragingRound& round,
             OuterCompression format, float* residual) {
  const int me = group.rank();
  if (is_dropped(round, me)) return;
  const std::vector<int> members = live_moshpit_members(me, group.size(), round);
  const std::size_t n = members.size();
  if (n < 2) return;  // alone in its group: nothing to average with
  // Every live member's payload reaches every live member by a ring inside the group, then each
  // averages them in member order (the same sum on every member).
  const std::size_t position =
      static_cast<std::size_t>(std::find(members.begin(), members.end(), me) - members.begin());
  const std::size_t bytes = compressed_bytes(count, format);
  std::vector<std::uint8_t> all(n * bytes);
  compress_contribution(values, residual, count, format, all.data() + position * bytes);
  const int next = members[(position + 1) % n], previous = members[(position + n - 1) % n];
  for (std::size_t hop = 1; hop < n; ++hop) {  // pass on what arrived in the previous hop
    const std::size_t out = (position + n - hop + 1) % n, in = (position + n - hop) % n;
    group.send_recv(all.data() + out * bytes, bytes, next, all.data() + in * bytes, bytes,
                    previous);
  }
  std::size_t averaged = 0;
  for (int m : members) averaged += contributes(round, m);
  if (averaged == 0) return;  // every live member excluded: each keeps its own
  std::fill_n(values, count, 0.0f);
  for (std::size_t m = 0; m < n; ++m)
    if (contributes(round, members[m]))
      decompress_add(all.data() + m * bytes, count, format, values);
  for (std::size_t i = 0; i < count; ++i) values[i] /= static_cast<float>(averaged);
}

// The bytes of each worker's payload in a gathered (robust) round: P(count) if it contributes.
std::vector<std::size_t> gathered_payloads(std::size_t count, int workers,
                                           const AveragingRound& round, OuterCompression format) {
  std::vector<std::size_t> payloads;
  for (int w = 0; w < workers; ++w)
    payloads.push_back(contributes(round, w) ? compressed_bytes(count, format) : 0);
  return payloads;
}

void gathered_rule(Communicator& group, float* values, std::size_t count,
                   const AveragingRound& round, OuterCompression format, float* residual) {
  const int me = group.rank();
  const std::vector<std::size_t> payloads = gathered_payloads(count, group.size(), round, format);
  std::vector<std::uint8_t> mine(payloads[static_cast<std::size_t>(me)]), all(sum_of(payloads));
  if (!mine.empty()) compress_contribution(values, residual, count, format, mine.data());
  group.all_gather_v(mine.data(), all.data(), payloads);
  if (is_dropped(round, me)) return;
  std::vector<std::vector<float>> trips;
  std::size_t at = 0;
  for (std::size_t bytes : payloads) {
    if (bytes == 0) continue;
    trips.emplace_back(count, 0.0f);
    decompress_add(all.data() + at, count, format, trips.back().data());
    at += bytes;
  }
  aggregate({trips.begin(), trips.end()}, round.aggregation, {values, count});
}

void check_drop_flags(const AveragingRound& round, int workers) {
  STRATA_CHECK(round.dropped.empty() || static_cast<int>(round.dropped.size()) == workers,
               "averaging: ", round.dropped.size(), " drop flags for ", workers, " workers");
  STRATA_CHECK(round.excluded.empty() || static_cast<int>(round.excluded.size()) == workers,
               "averaging: ", round.excluded.size(), " exclusion flags for ", workers, " workers");
}

}  // namespace

void average_across_workers(Communicator& group, Averaging algorithm, float* values,
                            std::size_t count, const AveragingRound& round, OuterCompression format,
                            float* residual) {
  check_drop_flags(round, group.size());
  if (group.size() == 1 || contributing_workers(round, group.size()) == 0) return;
  if (gathers(algorithm, round))
    return gathered_rule(group, values, count, round, format, residual);
  switch (algorithm) {
    case Averaging::all_reduce:
      if (format == OuterCompression::none)
        return all_reduce_mean(group, values, count, round, residual);
      return scatter_gather(group, values, count, round, format, residual, true);
    case Averaging::butterfly:
      return scatter_gather(group, values, count, round, format, residual, false);
    case Averaging::gossip:
      return gossip(group, values, count, round, format, residual);
    case Averaging::moshpit:
      return moshpit(group, values, count, round, format, residual);
  }
}

std::uint64_t averaging_bytes_sent(Averaging algorithm, OuterCompression format, std::size_t count,
                                   int workers, int worker, const AveragingRound& round) {
  check_drop_flags(round, workers);
  if (workers == 1 || contributing_workers(round, workers) == 0) return 0;
  if (gathers(algorithm, round))
    return ring_all_gather_v_bytes(gathered_payloads(count, workers, round, format), worker, 1);
  const bool live = !is_dropped(round, worker);
  switch (algorithm) {
    case Averaging::all_reduce:
    case Averaging::butterfly: {
      if (algorithm == Averaging::all_reduce && format == OuterCompression::none)
        return ring_all_reduce_bytes(4 * static_cast<std::uint64_t>(count), workers);
      const ScatterGather plan = scatter_gather_plan(count, workers, worker, round, format,
                                                     algorithm == Averaging::all_reduce);
      return sum_of(plan.sends) - plan.sends[static_cast<std::size_t>(worker)] +
             ring_all_gather_v_bytes(plan.averages, worker, 1);
    }
    case Averaging::gossip: {
      const int partner = gossip_partner(round, workers, worker);
      return partner != worker && live && !is_dropped(round, partner)
                 ? compressed_bytes(count, format)
                 : 0;
    }
    case Averaging::moshpit: {
      const std::size_t members = live_moshpit_members(worker, workers, round).size();
      return live && members >= 2 ? (members - 1) * compressed_bytes(count, format) : 0;
    }
  }
  return 0;
}

std::uint64_t screening_bytes_sent(int workers, int worker) {
  if (workers <= 1) return 0;
  const std::vector<std::size_t> one_each(static_cast<std::size_t>(workers), 1);
  return ring_all_gather_v_bytes(one_each, worker, sizeof(double));
}

std::vector<int> gossip_partners(std::uint64_t seed, std::int64_t round, int workers) {
  // Positions 0..n-1 (n = workers rounded up to even; position `workers` is nobody) hold the
  // workers in a seeded order; round r pairs them by the circle method of round-robin
  // tournaments: position n-1 with t = r mod (n-1), and (t+i, t-i) mod (n-1) for i < n/2. So
  // consecutive rounds never repeat a pairing, and every n-1 rounds each worker meets every other.
  const int n = workers + workers % 2;
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const std::uint64_t key = hash_combine(seed, hash_name("diloco/gossip"));
  for (int i = workers - 1; i > 0; --i) {  // shuffle the real workers (Fisher-Yates)
    const int j = std::min(
        i, static_cast<int>(uniform_open01(hash_combine(key, static_cast<std::uint64_t>(i))) *
                            (i + 1)));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  std::vector<int> partner(static_cast<std::size_t>(workers));
  std::iota(partner.begin(), partner.end(), 0);
  if (n < 2) return partner;
  const int t = static_cast<int>(round % (n - 1));
  auto pair = [&](int a, int b) {
    const int x = order[static_cast<std::size_t>(a)], y = order[static_cast<std::size_t>(b)];
    if (x >= workers || y >= workers) return;  // one of them is nobody: the other sits out
    partner[static_cast<std::size_t>(x)] = y;
    partner[static_cast<std::size_t>(y)] = x;
  };
  pair(n - 1, t);
  for (int i = 1; i < n / 2; ++i) pair((t + i) % (n - 1), (t - i + (n - 1)) % (n - 1));
  return partner;
}

int moshpit_dimensions(int workers, int group_size) {
  STRATA_CHECK(group_size >= 2, "moshpit groups of ", group_size);
  int d = 1;
  for (long long capacity = group_size; capacity < workers; capacity *= group_size) ++d;
  return d;
}

std::vector<int> moshpit_group(int worker, int workers, int group_size, std::int64_t round) {
  const int d = moshpit_dimensions(workers, group_size);
  long long stride = 1;  // M^(dimension)
  for (std::int64_t i = 0; i < round % d; ++i) stride *= group_size;
  const long long digit = worker / stride % group_size;
  const long long base = worker - digit * stride;
  std::vector<int> members;
  for (long long m = 0; m < group_size; ++m)
    if (const long long w = base + m * stride; w < workers) members.push_back(static_cast<int>(w));
  return members;
}

double consensus_distance(Communicator& group, const float* values, std::size_t count) {
  const double k = group.size();
  std::vector<double> mean(values, values + count);
  group.all_reduce_sum(mean.data(), count);
  double mean_norm = 0, own_distance = 0;
  for (std::size_t i = 0; i < count; ++i) {
    mean[i] /= k;
    mean_norm += mean[i] * mean[i];
    own_distance += (values[i] - mean[i]) * (values[i] - mean[i]);
  }
  double distance = std::sqrt(own_distance);
  group.all_reduce_sum(&distance, 1);
  return mean_norm > 0 ? distance / k / std::sqrt(mean_norm) : 0.0;
}

}  // namespace strata

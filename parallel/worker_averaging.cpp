#include "parallel/worker_averaging.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/core/counter_rng.h"
#include "model/core/error.h"

namespace strata {

Averaging averaging_from_name(const std::string& name) {
  if (name == "all_reduce") return Averaging::all_reduce;
  if (name == "butterfly") return Averaging::butterfly;
  if (name == "gossip") return Averaging::gossip;
  if (name == "moshpit") return Averaging::moshpit;
  fail("unknown diloco.averaging '", name, "' (expected all_reduce, butterfly, gossip or moshpit)");
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

void all_reduce_mean(Communicator& group, float* values, std::size_t count,
                     const AveragingRound& round) {
  const bool live = !is_dropped(round, group.rank());
  std::vector<float> sum(values, values + count);
  if (!live) std::fill(sum.begin(), sum.end(), 0.0f);
  sum.push_back(live ? 1.0f : 0.0f);  // the live count travels with the sums
  group.all_reduce_sum(sum.data(), sum.size());
  if (!live || sum.back() == 0) return;
  for (std::size_t i = 0; i < count; ++i) values[i] = sum[i] / sum.back();
}

void butterfly(Communicator& group, float* values, std::size_t count, const AveragingRound& round) {
  const int k = group.size(), me = group.rank();
  const std::vector<std::size_t> chunks = chunk_counts(count, k);
  const std::size_t width = chunks.front();  // every chunk padded to the first's size
  // To each owner its chunk, with a last slot saying whether this peer delivered.
  std::vector<float> send(static_cast<std::size_t>(k) * (width + 1), 0.0f);
  std::vector<float> received(send.size());
  const bool live = !is_dropped(round, me);
  std::size_t at = 0;
  for (int o = 0; o < k; ++o) {
    float* slot = send.data() + static_cast<std::size_t>(o) * (width + 1);
    if (live) std::copy_n(values + at, chunks[static_cast<std::size_t>(o)], slot);
    slot[width] = live ? 1.0f : 0.0f;
    at += chunks[static_cast<std::size_t>(o)];
  }
  group.all_to_all(send.data(), received.data(), width + 1);
  // The owner's average of its chunk over the peers that delivered (in peer order).
  std::vector<float> average(width + 1, 0.0f);
  for (int q = 0; q < k; ++q) {
    const float* slot = received.data() + static_cast<std::size_t>(q) * (width + 1);
    for (std::size_t i = 0; i <= width; ++i) average[i] += slot[i];
  }
  const bool owner_live = live && average[width] > 0;
  for (std::size_t i = 0; i < width; ++i) average[i] = owner_live ? average[i] / average[width] : 0;
  average[width] = owner_live ? 1.0f : 0.0f;
  std::vector<float> averages(static_cast<std::size_t>(k) * (width + 1));
  group.all_gather(average.data(), averages.data(), width + 1);
  if (!live) return;  // a dropped worker keeps its own vector
  at = 0;
  for (int o = 0; o < k; ++o) {
    const float* slot = averages.data() + static_cast<std::size_t>(o) * (width + 1);
    if (slot[width] > 0)  // a dropped owner's chunk stays local
      std::copy_n(slot, chunks[static_cast<std::size_t>(o)], values + at);
    at += chunks[static_cast<std::size_t>(o)];
  }
}

void gossip(Communicator& group, float* values, std::size_t count, const AveragingRound& round) {
  const int me = group.rank();
  const int partner =
      gossip_partners(round.seed, round.round, group.size())[static_cast<std::size_t>(me)];
  if (partner == me) return;
  // Both send their vector and a flag saying whether they are live.
  std::vector<float> mine(values, values + count), theirs(count + 1);
  mine.push_back(is_dropped(round, me) ? 0.0f : 1.0f);
  group.send_recv(mine.data(), mine.size(), partner, theirs.data(), theirs.size(), partner);
  if (is_dropped(round, me) || theirs.back() == 0) return;
  // a + b on one side, b + a on the other: the pair ends bitwise equal.
  for (std::size_t i = 0; i < count; ++i) values[i] = (values[i] + theirs[i]) * 0.5f;
}

void moshpit(Communicator& group, float* values, std::size_t count, const AveragingRound& round) {
  const int k = group.size(), me = group.rank();
  const std::vector<int> members = moshpit_group(me, k, round.moshpit_group_size, round.round);
  // Every member's vector and live flag reaches every member by a ring inside the group, then
  // each averages the live ones in member order (the same sum on every member).
  const std::size_t n = members.size();
  const std::size_t position =
      static_cast<std::size_t>(std::find(members.begin(), members.end(), me) - members.begin());
  std::vector<float> all(n * (count + 1), 0.0f);
  float* own = all.data() + position * (count + 1);
  std::copy_n(values, count, own);
  own[count] = is_dropped(round, me) ? 0.0f : 1.0f;
  const int next = members[(position + 1) % n], previous = members[(position + n - 1) % n];
  for (std::size_t hop = 1; hop < n; ++hop) {  // pass on what arrived in the previous hop
    const std::size_t out = (position + n - hop + 1) % n, in = (position + n - hop) % n;
    group.send_recv(all.data() + out * (count + 1), count + 1, next, all.data() + in * (count + 1),
                    count + 1, previous);
  }
  if (is_dropped(round, me)) return;
  std::vector<float> sum(count + 1, 0.0f);
  for (std::size_t m = 0; m < n; ++m) {
    const float* v = all.data() + m * (count + 1);
    if (v[count] == 0) continue;
    for (std::size_t i = 0; i <= count; ++i) sum[i] += v[i];
  }
  for (std::size_t i = 0; i < count; ++i) values[i] = sum[i] / sum[count];
}

}  // namespace

void average_across_workers(Communicator& group, Averaging algorithm, float* values,
                            std::size_t count, const AveragingRound& round) {
  STRATA_CHECK(round.dropped.empty() || static_cast<int>(round.dropped.size()) == group.size(),
               "averaging: ", round.dropped.size(), " drop flags for ", group.size(), " workers");
  if (group.size() == 1) return;
  switch (algorithm) {
    case Averaging::all_reduce:
      return all_reduce_mean(group, values, count, round);
    case Averaging::butterfly:
      return butterfly(group, values, count, round);
    case Averaging::gossip:
      return gossip(group, values, count, round);
    case Averaging::moshpit:
      return moshpit(group, values, count, round);
  }
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

// Averaging across DiLoCo workers (parallel/diloco/worker_averaging.h), run inside mpirun with one
// rank per worker (4 and 8): butterfly equals all_reduce's mean to 1e-6; compressed averages stay
// within the format's bound of the exact mean (and members that share an average hold it bitwise
// equal); dropped workers and owners behave as specified; the bytes each worker sends are exactly
// averaging_bytes_sent; error feedback keeps its residual within one quantisation step and makes
// the sum of the averages track the sum of the true means; a group of one changes nothing; moshpit
// on a full grid reaches the exact mean after d rounds; gossip pairs end equal and its consensus
// distance falls every round; the pairings and groups are what they claim to be. No training.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <span>
#include <vector>

#include "parallel/comm/mpi_communicator.h"
#include "parallel/diloco/outer_compression.h"
#include "parallel/diloco/worker_averaging.h"
#include "parallel/mesh/process_groups.h"

namespace strata {
namespace {

constexpr std::size_t kCount = 1003;  // not a multiple of the worker count

float value(int worker, std::size_t i) {
  return static_cast<float>(std::sin(0.11 * static_cast<double>(i) + 0.7 * worker) * (1 + worker));
}

std::vector<float> vector_of(int worker) {
  std::vector<float> v(kCount);
  for (std::size_t i = 0; i < kCount; ++i) v[i] = value(worker, i);
  return v;
}

// The mean over `workers` (all when empty) of element i, in double.
double mean_of(std::size_t i, int k, const std::vector<bool>& dropped = {}) {
  double sum = 0;
  int live = 0;
  for (int w = 0; w < k; ++w)
    if (dropped.empty() || !dropped[static_cast<std::size_t>(w)]) {
      sum += value(w, i);
      ++live;
    }
  return sum / live;
}

struct World {
  MpiCommunicator comm{MPI_COMM_WORLD, 1};
  int k = comm.size(), me = comm.rank();
};

constexpr OuterCompression kCompressed[] = {OuterCompression::fp16, OuterCompression::bf16,
                                            OuterCompression::int8, OuterCompression::int4};

// The largest |x − x̂| one round trip in `format` leaves on a value of magnitude `magnitude` in a
// block whose largest magnitude is at most `absmax`. The 16-bit formats round to nearest with 8
// (bf16) and 11 (fp16) significant bits: half an ulp is at most 2^-8·|x| and 2^-11·|x| (fp16's
// subnormals: half of 2^-24). The block formats: parallel/diloco/outer_compression.h's bound.
double rounding_bound(OuterCompression format, double magnitude, double absmax) {
  switch (format) {
    case OuterCompression::none:
      return 0;
    case OuterCompression::bf16:
      return 0x1p-8 * magnitude;
    case OuterCompression::fp16:
      return 0x1p-11 * magnitude + 0x1p-25;
    case OuterCompression::int8:
      return absmax / 127 * (0.5 + 127 * 0x1p-22);
    case OuterCompression::int4:
      return absmax / 7 * (0.5 + 7 * 0x1p-22);
  }
  return 0;
}

double absmax_of(int worker) {
  double absmax = 0;
  for (std::size_t i = 0; i < kCount; ++i)
    absmax = std::max(absmax, std::fabs(static_cast<double>(value(worker, i))));
  return absmax;
}

// The exact mean of `workers`' vectors, and how far an average of their round trips in `format`
// may land from it: each contribution rounded once, and with `average_rounded` the average once
// more (the scatter–gather's all-gather), plus fp32's own sums.
struct Expected {
  std::vector<double> mean, tolerance;
};
Expected expected_mean(const std::vector<int>& workers, OuterCompression format,
                       bool average_rounded) {
  Expected e{std::vector<double>(kCount, 0.0), std::vector<double>(kCount, 0.0)};
  for (int w : workers) {
    const double absmax = absmax_of(w);
    for (std::size_t i = 0; i < kCount; ++i) {
      e.mean[i] += value(w, i) / static_cast<double>(workers.size());
      e.tolerance[i] += rounding_bound(format, std::fabs(value(w, i)), absmax) /
                        static_cast<double>(workers.size());
    }
  }
  double average_absmax = 0;
  for (std::size_t i = 0; i < kCount; ++i)
    average_absmax = std::max(average_absmax, std::fabs(e.mean[i]) + e.tolerance[i]);
  for (std::size_t i = 0; i < kCount; ++i) {
    if (average_rounded)
      e.tolerance[i] +=
          rounding_bound(format, std::fabs(e.mean[i]) + e.tolerance[i], average_absmax);
    e.tolerance[i] += 1e-6 * (1 + std::fabs(e.mean[i]));
  }
  return e;
}

std::vector<int> live_of(int k, const std::vector<bool>& dropped) {
  std::vector<int> live;
  for (int w = 0; w < k; ++w)
    if (dropped.empty() || !dropped[static_cast<std::size_t>(w)]) live.push_back(w);
  return live;
}

// The largest |v − expected| / tolerance (≤ 1: within the bound) and the largest |v − expected|
// (well above fp32's 1e-6 when a compressed format did round).
struct Deviation {
  double relative_to_bound = 0, largest = 0;
};
Deviation deviation(const std::vector<float>& v, const Expected& e) {
  Deviation d;
  for (std::size_t i = 0; i < kCount; ++i) {
    const double off = std::fabs(v[i] - e.mean[i]);
    d.relative_to_bound = std::max(d.relative_to_bound, off / e.tolerance[i]);
    d.largest = std::max(d.largest, off);
  }
  return d;
}

// The first element i < kCount where ok(i) fails, else kCount. Tests check a whole vector with
// one EXPECT on this rather than an ASSERT per element: a rank that left a test early would
// strand its peers inside the next collective.
template <typename Ok>
std::size_t first_failure(Ok ok) {
  for (std::size_t i = 0; i < kCount; ++i)
    if (!ok(i)) return i;
  return kCount;
}

// Worker `peer`'s vector, by an exchange with it (both call this with each other).
std::vector<float> exchanged(World& w, const std::vector<float>& v, int peer) {
  std::vector<float> theirs(v.size());
  w.comm.send_recv(v.data(), v.size(), peer, theirs.data(), theirs.size(), peer);
  return theirs;
}

TEST(WorkerAveraging, AllReduceAndButterflyGiveTheMean) {
  World w;
  for (Averaging algorithm : {Averaging::all_reduce, Averaging::butterfly}) {
    std::vector<float> v = vector_of(w.me);
    average_across_workers(w.comm, algorithm, v.data(), kCount, {});
    EXPECT_EQ(first_failure([&](std::size_t i) {
                return std::fabs(v[i] - mean_of(i, w.k)) <= 1e-6 * (1 + std::fabs(mean_of(i, w.k)));
              }),
              kCount)
        << static_cast<int>(algorithm);
  }
  std::vector<float> a = vector_of(w.me), b = vector_of(w.me);
  average_across_workers(w.comm, Averaging::all_reduce, a.data(), kCount, {});
  average_across_workers(w.comm, Averaging::butterfly, b.data(), kCount, {});
  EXPECT_EQ(first_failure([&](std::size_t i) {
              return std::fabs(a[i] - b[i]) <= 1e-6 * (1 + std::fabs(a[i]));
            }),
            kCount);
}

TEST(WorkerAveraging, CompressedAveragesStayWithinTheFormatsBoundAndAgreeBitwise) {
  World w;
  const std::vector<int> everyone = live_of(w.k, {});
  for (OuterCompression format : kCompressed) {
    // all_reduce and butterfly: the mean of every worker, two roundings, the same on every worker.
    const Expected mean = expected_mean(everyone, format, true);
    for (Averaging algorithm : {Averaging::all_reduce, Averaging::butterfly}) {
      std::vector<float> v = vector_of(w.me);
      average_across_workers(w.comm, algorithm, v.data(), kCount, {}, format);
      const Deviation d = deviation(v, mean);
      EXPECT_LE(d.relative_to_bound, 1.0)
          << static_cast<int>(algorithm) << "/" << static_cast<int>(format);
      EXPECT_GT(d.largest, 1e-5) << "nothing was rounded";
      std::vector<float> first = v;
      w.comm.broadcast(std::span<float>(first), 0);
      EXPECT_EQ(v, first) << "workers disagree";
    }
    // gossip: the pair's mean, one rounding each; both ends bitwise equal.
    AveragingRound round;
    round.seed = 5;
    const int partner = gossip_partners(5, 0, w.k)[static_cast<std::size_t>(w.me)];
    std::vector<float> v = vector_of(w.me);
    average_across_workers(w.comm, Averaging::gossip, v.data(), kCount, round, format);
    EXPECT_LE(deviation(v, expected_mean({w.me, partner}, format, false)).relative_to_bound, 1.0);
    EXPECT_EQ(exchanged(w, v, partner), v);
    // moshpit: the group's mean (groups of 2 in round 0), one rounding each; members equal.
    const std::vector<int> group = moshpit_group(w.me, w.k, 2, 0);
    ASSERT_EQ(group.size(), 2u);
    std::vector<float> u = vector_of(w.me);
    average_across_workers(w.comm, Averaging::moshpit, u.data(), kCount, {}, format);
    EXPECT_LE(deviation(u, expected_mean(group, format, false)).relative_to_bound, 1.0);
    EXPECT_EQ(exchanged(w, u, group[0] == w.me ? group[1] : group[0]), u);
  }
}

TEST(WorkerAveraging, DroppedWorkersKeepTheirOwnAndAreLeftOut) {
  World w;
  AveragingRound round;
  round.seed = 5;
  round.dropped.assign(static_cast<std::size_t>(w.k), false);
  round.dropped[1] = true;  // worker 1 fails: as a peer and as butterfly's owner of chunk 1
  const std::size_t chunk = (kCount + w.k - 1) / w.k;
  const std::vector<int> live = live_of(w.k, round.dropped);
  for (OuterCompression format : {OuterCompression::none, OuterCompression::int8}) {
    // all_reduce's owner 1 still averages chunk 1; butterfly's leaves it local everywhere.
    const Expected mean = expected_mean(live, format, format != OuterCompression::none);
    for (Averaging algorithm : {Averaging::all_reduce, Averaging::butterfly}) {
      std::vector<float> v = vector_of(w.me);
      average_across_workers(w.comm, algorithm, v.data(), kCount, round, format);
      EXPECT_EQ(first_failure([&](std::size_t i) {
                  const bool owner_failed = algorithm == Averaging::butterfly && i / chunk == 1;
                  if (w.me == 1 || owner_failed) return v[i] == value(w.me, i);
                  return std::fabs(v[i] - mean.mean[i]) <= mean.tolerance[i];
                }),
                kCount)
          << "worker " << w.me << " algorithm " << static_cast<int>(algorithm) << " format "
          << static_cast<int>(format);
    }
    // gossip and moshpit (groups of 2): a worker paired with a failed one keeps its own too.
    const int partner = gossip_partners(5, 0, w.k)[static_cast<std::size_t>(w.me)];
    const std::vector<int> group = moshpit_group(w.me, w.k, 2, 0);
    for (Averaging algorithm : {Averaging::gossip, Averaging::moshpit}) {
      const std::vector<int> pair =
          algorithm == Averaging::gossip ? std::vector<int>{w.me, partner} : group;
      std::vector<float> v = vector_of(w.me);
      average_across_workers(w.comm, algorithm, v.data(), kCount, round, format);
      if (std::find(pair.begin(), pair.end(), 1) != pair.end() || pair[0] == pair[1]) {
        EXPECT_EQ(v, vector_of(w.me)) << static_cast<int>(algorithm);
      } else {
        EXPECT_LE(deviation(v, expected_mean(pair, format, false)).relative_to_bound, 1.0)
            << static_cast<int>(algorithm);
      }
    }
  }
}

TEST(WorkerAveraging, BytesSentAreExactlyAveragingBytesSent) {
  World w;
  std::vector<bool> one_dropped(static_cast<std::size_t>(w.k), false), all_dropped(one_dropped);
  one_dropped[1] = true;
  all_dropped.flip();
  const OuterCompression formats[] = {OuterCompression::none, OuterCompression::bf16,
                                      OuterCompression::int8, OuterCompression::int4};
  std::vector<bool> one_excluded(static_cast<std::size_t>(w.k), false);
  one_excluded[2] = true;
  for (std::size_t count : {kCount, std::size_t{5}})  // 5: empty chunks at 8 workers
    for (const std::vector<bool>& dropped : {std::vector<bool>{}, one_dropped, all_dropped})
      for (const std::vector<bool>& excluded : {std::vector<bool>{}, one_excluded})
        for (AggregationRule rule : {AggregationRule::mean, AggregationRule::centered_clip})
          for (Averaging algorithm : {Averaging::all_reduce, Averaging::butterfly,
                                      Averaging::gossip, Averaging::moshpit}) {
            if (rule != AggregationRule::mean && algorithm != Averaging::all_reduce) continue;
            std::vector<std::uint64_t> sent;
            for (OuterCompression format : formats) {
              AveragingRound round;
              round.round = 1;
              round.seed = 5;
              round.dropped = dropped;
              round.excluded = excluded;
              round.aggregation.rule = rule;
              std::vector<float> v = vector_of(w.me);
              v.resize(count);
              std::vector<float> residual(count, 0.25f);
              w.comm.reset_stats();
              average_across_workers(w.comm, algorithm, v.data(), count, round, format,
                                     format == OuterCompression::int8 ? nullptr : residual.data());
              sent.push_back(w.comm.stats().total_bytes());
              EXPECT_EQ(sent.back(),
                        averaging_bytes_sent(algorithm, format, count, w.k, w.me, round))
                  << "algorithm " << static_cast<int>(algorithm) << " format "
                  << static_cast<int>(format) << " count " << count << " drops " << dropped.size()
                  << " exclusions " << excluded.size() << " rule " << static_cast<int>(rule);
            }
            if (count == kCount &&
                dropped.empty()) {  // every worker sends, and less when compressed
              EXPECT_GT(sent[1], sent[2]);
              EXPECT_GT(sent[0], sent[1]);
              EXPECT_GT(sent[2], sent[3]);
            }
            if (dropped == all_dropped) {
              EXPECT_EQ(sent, std::vector<std::uint64_t>(4, 0));
            }
          }
  // One worker's gossip payload is its whole vector compressed, nothing more.
  AveragingRound round;
  EXPECT_EQ(
      averaging_bytes_sent(Averaging::gossip, OuterCompression::int4, kCount, w.k, w.me, round),
      compressed_bytes(kCount, OuterCompression::int4));
}

// Every worker's vector, gathered: worker q's at q · v.size().
std::vector<float> gathered(World& w, const std::vector<float>& v) {
  std::vector<float> all(v.size() * static_cast<std::size_t>(w.k));
  w.comm.all_gather(v.data(), all.data(), v.size());
  return all;
}

TEST(WorkerAveraging, AnExcludedWorkerSendsNothingIntoTheAverageAndTakesIt) {
  World w;
  std::vector<bool> excluded(static_cast<std::size_t>(w.k), false);
  excluded[2] = true;
  std::vector<int> others;
  for (int q = 0; q < w.k; ++q)
    if (q != 2) others.push_back(q);
  for (Averaging algorithm : {Averaging::all_reduce, Averaging::butterfly})
    for (OuterCompression format : {OuterCompression::none, OuterCompression::int8}) {
      AveragingRound round;
      round.excluded = excluded;
      std::vector<float> v = vector_of(w.me);
      average_across_workers(w.comm, algorithm, v.data(), kCount, round, format);
      // The mean of the others, on the excluded worker too; all_reduce: bitwise equal everywhere.
      EXPECT_LE(deviation(v, expected_mean(others, format, format != OuterCompression::none))
                    .relative_to_bound,
                1.0)
          << static_cast<int>(algorithm) << " " << static_cast<int>(format);
      const std::vector<float> all = gathered(w, v);
      if (algorithm == Averaging::all_reduce) {
        for (int q = 1; q < w.k; ++q)
          EXPECT_TRUE(std::equal(all.begin(), all.begin() + kCount, all.begin() + q * kCount));
      }
    }
  // Gossip: an excluded worker takes its partner's vector, and the partner keeps its own.
  AveragingRound round;
  round.round = 3;
  round.seed = 5;
  round.excluded = excluded;
  std::vector<float> v = vector_of(w.me);
  average_across_workers(w.comm, Averaging::gossip, v.data(), kCount, round);
  const int partner = gossip_partners(round.seed, round.round, w.k)[static_cast<std::size_t>(w.me)];
  if (w.me == 2 && partner != 2) {
    EXPECT_EQ(v, vector_of(partner));
  }
  if (partner == 2) {
    EXPECT_EQ(v, vector_of(w.me));
  }
}

// Near-equal honest vectors, and worker 0's scaled by 1e3.
std::vector<float> honest_or_scaled(int worker) {
  std::vector<float> v(kCount);
  for (std::size_t i = 0; i < kCount; ++i)
    v[i] = static_cast<float>(std::cos(0.05 * static_cast<double>(i))) + 0.01f * value(worker, i);
  if (worker == 0)
    for (float& x : v) x *= 1e3f;
  return v;
}

TEST(WorkerAveraging, RobustRulesAreBitwiseEqualEverywhereAndIgnoreAScaledWorker) {
  World w;
  std::vector<double> honest(kCount, 0.0);
  double honest_norm = 0;
  for (std::size_t i = 0; i < kCount; ++i) {
    for (int q = 1; q < w.k; ++q) honest[i] += honest_or_scaled(q)[i] / (w.k - 1);
    honest_norm += honest[i] * honest[i];
  }
  honest_norm = std::sqrt(honest_norm);
  for (AggregationRule rule :
       {AggregationRule::mean, AggregationRule::trimmed_mean, AggregationRule::centered_clip})
    for (OuterCompression format : {OuterCompression::none, OuterCompression::int8}) {
      AveragingRound round;
      round.aggregation.rule = rule;
      std::vector<float> v = honest_or_scaled(w.me);
      average_across_workers(w.comm, Averaging::all_reduce, v.data(), kCount, round, format);
      double distance = 0;
      for (std::size_t i = 0; i < kCount; ++i) distance += (v[i] - honest[i]) * (v[i] - honest[i]);
      distance = std::sqrt(distance);
      if (rule == AggregationRule::mean) {
        EXPECT_GT(distance, 10 * honest_norm);
      } else {
        EXPECT_LT(distance, 0.05 * honest_norm) << static_cast<int>(rule);
      }
      const std::vector<float> all = gathered(w, v);
      for (int q = 1; q < w.k; ++q)
        EXPECT_TRUE(std::equal(all.begin(), all.begin() + kCount, all.begin() + q * kCount))
            << static_cast<int>(rule) << " " << static_cast<int>(format);
    }
}

TEST(WorkerAveraging, ErrorFeedbackResidualStaysWithinOneStepAndSkipsDroppedWorkers) {
  World w;
  const std::vector<float> x = vector_of(w.me);
  std::vector<float> residual(kCount, 0.0f);
  for (int r = 0; r < 5; ++r) {
    double absmax = 0;  // of what is compressed: x + residual
    for (std::size_t i = 0; i < kCount; ++i)
      absmax = std::max(absmax, std::fabs(static_cast<double>(x[i]) + residual[i]));
    std::vector<float> v = x;
    average_across_workers(w.comm, Averaging::all_reduce, v.data(), kCount, {},
                           OuterCompression::int4, residual.data());
    EXPECT_EQ(first_failure([&](std::size_t i) {
                return std::fabs(residual[i]) <= rounding_bound(OuterCompression::int4, 0, absmax);
              }),
              kCount)
        << "round " << r;
    EXPECT_NE(residual, std::vector<float>(kCount, 0.0f)) << "int4 lost nothing";
  }
  // A dropped worker sent nothing: its residual (and vector) stay as they were; the others move.
  AveragingRound round;
  round.dropped.assign(static_cast<std::size_t>(w.k), false);
  round.dropped[1] = true;
  const std::vector<float> before = residual;
  std::vector<float> v = x;
  average_across_workers(w.comm, Averaging::all_reduce, v.data(), kCount, round,
                         OuterCompression::int4, residual.data());
  if (w.me == 1) {
    EXPECT_EQ(residual, before);
    EXPECT_EQ(v, x);
  } else {
    EXPECT_NE(residual, before);
  }
  // Nor is what was sent to nobody: butterfly's chunk of the dropped owner 1, gossip's vector
  // when the partner dropped (or when it sits out).
  const std::size_t chunk = (kCount + w.k - 1) / w.k;
  const int partner = gossip_partners(round.seed, round.round, w.k)[static_cast<std::size_t>(w.me)];
  for (Averaging algorithm : {Averaging::butterfly, Averaging::gossip}) {
    const std::vector<float> start = residual;
    std::vector<float> u = x;
    average_across_workers(w.comm, algorithm, u.data(), kCount, round, OuterCompression::int4,
                           residual.data());
    auto kept = [&](std::size_t i) {
      return w.me == 1 ||
             (algorithm == Averaging::butterfly ? i / chunk == 1 : partner == 1 || partner == w.me);
    };
    EXPECT_EQ(first_failure([&](std::size_t i) { return !kept(i) || residual[i] == start[i]; }),
              kCount)
        << static_cast<int>(algorithm);
    if (first_failure(kept) < kCount) {  // it sent something: that part of the residual moved
      EXPECT_NE(residual, start) << static_cast<int>(algorithm);
    }
  }
  // Format none loses nothing: the residual ends 0 on every algorithm.
  for (Averaging algorithm :
       {Averaging::all_reduce, Averaging::butterfly, Averaging::gossip, Averaging::moshpit}) {
    std::vector<float> exact(kCount, 0.5f);
    std::vector<float> u = x;
    average_across_workers(w.comm, algorithm, u.data(), kCount, {}, OuterCompression::none,
                           exact.data());
    EXPECT_EQ(exact, std::vector<float>(kCount, 0.0f)) << static_cast<int>(algorithm);
  }
}

// Worker 0 holds x, the others zeros, so every round averages exactly worker 0's round trip / k
// and the average's own rounding is exact up to fp32's last bits (a value already on the int4
// grid, scaled by a power of 2). What remains is what the contribution's rounding loses: with
// error feedback the sum over rounds of the averages is R·x/k − residual/k, within one step;
// without it every round loses the same, and the sum drifts R times as far.
TEST(WorkerAveraging, ErrorFeedbackSumTracksTheSumOfTheTrueMeans) {
  World w;
  constexpr int kRounds = 8;
  const std::vector<float> x = w.me == 0 ? vector_of(0) : std::vector<float>(kCount, 0.0f);
  const double step = absmax_of(0) / 7 * 1.1;  // the int4 scale of x + residual, at most
  double drift[2] = {0, 0};                    // without, with error feedback
  for (int feedback = 0; feedback < 2; ++feedback) {
    std::vector<float> residual(kCount, 0.0f);
    std::vector<double> sum(kCount, 0.0);
    for (int r = 0; r < kRounds; ++r) {
      std::vector<float> v = x;
      average_across_workers(w.comm, Averaging::all_reduce, v.data(), kCount, {},
                             OuterCompression::int4, feedback ? residual.data() : nullptr);
      for (std::size_t i = 0; i < kCount; ++i) sum[i] += v[i];
    }
    for (std::size_t i = 0; i < kCount; ++i)
      drift[feedback] = std::max(drift[feedback], std::fabs(sum[i] - kRounds * value(0, i) / w.k));
  }
  const double one_step = step * (0.5 + kRounds * 0x1p-16) / w.k;
  EXPECT_LE(drift[1], one_step);
  EXPECT_GT(drift[0], 2 * one_step);
}

TEST(WorkerAveraging, AGroupOfOneChangesNothing) {
  World w;
  // The outer group of a DiLoCo job of one worker (every mesh rank's counterparts: itself).
  const ProcessGroups groups(Mesh(w.k, w.me, 1, 1, 0, 1), w.comm, 1);
  Communicator* const alone = &groups.outer();
  ASSERT_EQ(alone->size(), 1);
  for (OuterCompression format :
       {OuterCompression::none, OuterCompression::fp16, OuterCompression::bf16,
        OuterCompression::int8, OuterCompression::int4})
    for (Averaging algorithm :
         {Averaging::all_reduce, Averaging::butterfly, Averaging::gossip, Averaging::moshpit}) {
      std::vector<float> v = vector_of(w.me), residual(kCount, 0.125f);
      alone->reset_stats();
      average_across_workers(*alone, algorithm, v.data(), kCount, {}, format, residual.data());
      EXPECT_EQ(v, vector_of(w.me))
          << static_cast<int>(algorithm) << "/" << static_cast<int>(format);
      EXPECT_EQ(residual, std::vector<float>(kCount, 0.125f));
      EXPECT_EQ(alone->stats().total_bytes(), 0u);
      EXPECT_EQ(averaging_bytes_sent(algorithm, format, kCount, 1, 0, {}), 0u);
    }
}

TEST(WorkerAveraging, MoshpitOnAFullGridReachesTheExactMeanAfterDRounds) {
  World w;
  const int d = moshpit_dimensions(w.k, 2);
  ASSERT_EQ(1 << d, w.k);  // 4 or 8 workers: a full grid of groups of 2
  std::vector<float> v = vector_of(w.me);
  for (int r = 0; r < d; ++r) {
    AveragingRound round;
    round.round = r;
    average_across_workers(w.comm, Averaging::moshpit, v.data(), kCount, round);
    if (r + 1 < d) {  // not yet: some element still differs from the mean
      double off = 0;
      for (std::size_t i = 0; i < kCount; ++i)
        off = std::max(off, std::fabs(v[i] - mean_of(i, w.k)));
      EXPECT_GT(off, 1e-3) << "round " << r;
    }
  }
  EXPECT_EQ(first_failure([&](std::size_t i) {
              return std::fabs(v[i] - mean_of(i, w.k)) <= 1e-5 * (1 + std::fabs(mean_of(i, w.k)));
            }),
            kCount);
  // A worker that fails leaves its group: it keeps its own, its partner its own too (groups of 2).
  AveragingRound failing;
  failing.dropped.assign(static_cast<std::size_t>(w.k), false);
  failing.dropped[0] = true;
  std::vector<float> u = vector_of(w.me);
  average_across_workers(w.comm, Averaging::moshpit, u.data(), kCount, failing);
  const std::vector<int> group = moshpit_group(w.me, w.k, 2, 0);
  const bool with_failed = std::find(group.begin(), group.end(), 0) != group.end();
  if (with_failed) {
    EXPECT_EQ(u, vector_of(w.me));
  }
}

TEST(WorkerAveraging, GossipPairsEndEqualAndConsensusDistanceFalls) {
  World w;
  std::vector<float> v = vector_of(w.me);
  double distance = consensus_distance(w.comm, v.data(), kCount);
  for (int r = 0; r < 6; ++r) {
    AveragingRound round;
    round.round = r;
    round.seed = 5;
    average_across_workers(w.comm, Averaging::gossip, v.data(), kCount, round);
    // The pair ended bitwise equal.
    const int partner = gossip_partners(5, r, w.k)[static_cast<std::size_t>(w.me)];
    std::vector<float> theirs(kCount);
    w.comm.send_recv(v.data(), kCount, partner, theirs.data(), kCount, partner);
    EXPECT_EQ(theirs, v) << "round " << r;
    const double next = consensus_distance(w.comm, v.data(), kCount);
    // Falls every round until consensus (4 workers reach it after 2 rounds: two disjoint pairings).
    if (distance > 1e-6) {
      EXPECT_LT(next, distance) << "round " << r;
    } else {
      EXPECT_LE(next, 1e-6) << "round " << r;
    }
    distance = next;
  }
}

TEST(WorkerAveraging, PairingsGroupsAndDropsAreWhatTheyClaim) {
  for (int k : {2, 5, 8}) {
    for (std::int64_t r = 0; r < 4; ++r) {
      const std::vector<int> partner = gossip_partners(3, r, k);
      int alone = 0;
      for (int w = 0; w < k; ++w) {
        EXPECT_EQ(partner[static_cast<std::size_t>(partner[static_cast<std::size_t>(w)])], w);
        alone += partner[static_cast<std::size_t>(w)] == w;
      }
      EXPECT_EQ(alone, k % 2);
      if (r > 0 && k > 2) {  // two workers have one pairing only
        EXPECT_NE(partner, gossip_partners(3, r - 1, k)) << "a pairing repeated";
      }
      // Moshpit's groups of a round partition the workers.
      std::set<int> seen;
      for (int w = 0; w < k; ++w) {
        const std::vector<int> group = moshpit_group(w, k, 2, r);
        EXPECT_NE(std::find(group.begin(), group.end(), w), group.end());
        for (int m : group) EXPECT_EQ(moshpit_group(m, k, 2, r), group);
        seen.insert(w);
      }
      EXPECT_EQ(static_cast<int>(seen.size()), k);
    }
    EXPECT_NE(gossip_partners(3, 0, k == 2 ? 2 : k),
              std::vector<int>(static_cast<std::size_t>(k), 0));
  }
  EXPECT_EQ(dropped_workers(1, 7, 6, 0.0), std::vector<bool>(6, false));
  EXPECT_EQ(dropped_workers(1, 7, 6, 0.5), dropped_workers(1, 7, 6, 0.5));
  int drops = 0;
  for (std::int64_t r = 0; r < 200; ++r)
    for (bool d : dropped_workers(1, r, 5, 0.3)) drops += d;
  EXPECT_NEAR(drops / 1000.0, 0.3, 0.05);
  EXPECT_EQ(moshpit_dimensions(8, 2), 3);
  EXPECT_EQ(moshpit_dimensions(9, 3), 2);
  EXPECT_EQ(moshpit_dimensions(10, 3), 3);
}

}  // namespace
}  // namespace strata

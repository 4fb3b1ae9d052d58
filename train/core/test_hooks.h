// What a test may make a real `train` run do that no user would ask for: failures and timings
// the tests of recovery, divergence and elastic DiLoCo need at an exact point of a run. They come
// through one channel only, the environment variable STRATA_TEST_HOOKS, which `train` reads once
// at start-up (train/main.cpp) into a TestHooks handed to the loop, which passes each hook to the
// part that acts on it (the step, the optimizer, DiLoCo); nothing else reads the environment for
// a test. Unset, as on every user's run, the hooks are empty and nothing acts.
//
//   STRATA_TEST_HOOKS='nonfinite_steps=5,6 step_seconds=0.2 kill_in_update=8 kill_in_averaging=20'
//   STRATA_TEST_HOOKS='kill_in_request=30'
//   STRATA_TEST_HOOKS='poison_outer=scale:3'
//
// Hooks are `name=value` items separated by spaces; an unknown name or a malformed value is an
// error naming it. They are deliberately not config keys: a config is a user's, and is written
// into checkpoints.
#pragma once

#include <cstdint>
#include <set>
#include <string_view>

namespace strata {

struct TestHooks {
  // nonfinite_steps: the steps (1-based) whose gradients count as non-finite, as a NaN in any
  // rank's gradients would make them (train.nonfinite's policies, tests/unit/run_recovery_test).
  std::set<std::int64_t> nonfinite_steps;
  // step_seconds: each step lasts at least this long, so that a test of elastic DiLoCo can act
  // inside an inner phase on a busy machine; a swarm peer's requests each last at least this
  // long (a slow peer, whatever the machine's load).
  double step_seconds = 0;
  // kill_in_update: SIGKILL in the middle of optimizer update number N (its bias-correction
  // count), in the visit of a chunk after the first: weights and offloaded state half updated
  // (tests/mpi/optimizers_test). 0: never.
  std::int64_t kill_in_update = 0;
  // kill_in_averaging: SIGKILL between the two pieces of the averaging of the sync after step N:
  // the others hold part of an average (tests/mpi/elastic_diloco_test). −1: never.
  // A swarm peer (train/swarm/): the averaging of the round that makes its stage's step N.
  std::int64_t kill_in_averaging = -1;
  // kill_in_request: a swarm peer SIGKILLs itself while it handles its N-th request (1-based),
  // after the work and before the reply: its caller must send the request to another peer
  // (tests/mpi/swarm_test). 0: never.
  std::int64_t kill_in_request = 0;

  // poison_outer=KIND or KIND:W: a DiLoCo worker misbehaves at every sync, as a faulty or
  // malicious one would (tests/mpi/robust_diloco_test): `nan`, one value of its outer gradient is
  // NaN; `scale`, its outer gradient is sent ×1e3; `noise`, Gaussian noise of 3× its outer
  // gradient's RMS is added (a norm about 3× an honest one's: within the default screen). W: the
  // worker index of an in-job run; without it every worker of this process (an elastic worker job).
  enum class Poison { none, nan, scale, noise };
  Poison poison_outer = Poison::none;
  int poison_worker = -1;  // −1: every worker of this process

  bool empty() const {
    return nonfinite_steps.empty() && step_seconds == 0 && kill_in_update == 0 &&
           kill_in_averaging < 0 && kill_in_request == 0 && poison_outer == Poison::none;
  }
  // The hooks `text` names (the format above).
  static TestHooks parse(std::string_view text);
  // STRATA_TEST_HOOKS's hooks; empty when it is unset.
  static TestHooks from_environment();
};

}  // namespace strata

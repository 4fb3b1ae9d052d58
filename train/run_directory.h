// A fresh run's claim on its directories: no run silently replaces another.
//
// A fresh run (no --resume) whose run directory already holds an earlier run's `metrics.jsonl` or
// `config.yaml`, or whose checkpoint directory holds checkpoints, stops with one error naming
// what is there and the three ways on: `--resume` to continue that run, another `run.name`, or
// `--overwrite` to replace it. Under --overwrite the earlier run's checkpoints are removed (so
// that no later --resume picks one of them up) and its metrics and config are rewritten by the
// new run. A directory with nothing of a run's (a folder made by hand for `--init`, a checkpoint
// directory of temporary files only) is free.
#pragma once

#include <string>
#include <vector>

#include "plan/config.h"

namespace strata {

// What an earlier run left in `config`'s run and checkpoint directories (paths).
struct EarlierRun {
  std::vector<std::string> records;      // its metrics.jsonl and config.yaml, where present
  std::vector<std::string> checkpoints;  // its step_*.h5, oldest first
  bool empty() const { return records.empty() && checkpoints.empty(); }
};
EarlierRun earlier_run(const Config& config);

// One rank (rank 0, which writes the run's files right after): throws, naming the files and the
// ways on, when the directories hold an earlier run's files and `overwrite` is off; under
// `overwrite` removes the earlier run's checkpoints and says so on standard output.
void claim_run_directory(const Config& config, bool overwrite);

}  // namespace strata

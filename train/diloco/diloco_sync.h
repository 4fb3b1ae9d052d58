// Diloco's one sync of a fragment (train/diloco/diloco.h), shared by the class's translation units:
// diloco.cpp (the sync's life) and diloco_screen.cpp (the screen and its test hook). Private to
// them.
#pragma once

#include <exception>
#include <thread>
#include <vector>

#include "train/diloco/diloco.h"

namespace strata {

// One sync of a fragment: the pieces' parameters when it was prepared (θ_s), the vectors averaged
// in place (θ uncompressed, the outer gradient anchor − θ compressed), and, with overlap, the
// thread that averages them.
struct Diloco::Sync {
  OuterSyncReport report;
  AveragingRound round;
  bool dropped = false;
  double own_norm = 0;  // ‖this worker's outer gradient‖ over the fragment, as sent
  std::vector<std::vector<float>> start, values;
  std::thread thread;
  std::exception_ptr error;
  bool started = false;
  double wait_seconds = 0;
};

}  // namespace strata

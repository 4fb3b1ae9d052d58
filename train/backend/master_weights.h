// The fp32 master weights of a rank's layout, as DiLoCo's outer step reads and writes them
// (train/diloco/diloco.h): a training backend's (train/backend/training_backend.h), or the logical
// model an elastic worker of its own layout averages on its rank 0
// (train/diloco/logical_replica.h).
#pragma once

#include "model/core/element_range.h"

namespace strata {

class MasterWeights {
 public:
  virtual ~MasterWeights() = default;
  // The weights of `range` (layout elements): read copies them out, elements this rank does not
  // hold (padding past the layout) as 0; write replaces those it holds and refreshes whatever is
  // computed from them (a backend's compute-dtype copy).
  virtual void read_master_weights(ElementRange range, float* out) = 0;
  virtual void write_master_weights(ElementRange range, const float* in) = 0;
};

}  // namespace strata

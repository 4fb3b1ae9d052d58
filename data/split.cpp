#include "data/split.h"

#include <algorithm>

#include "model/core/counter_rng.h"
#include "model/core/error.h"

namespace strata {

std::vector<bool> choose_validation_documents(std::size_t documents, double val_fraction) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    fail("validation fraction must be in [0, 1), got ", val_fraction);
  }
  const std::uint64_t key = hash_name("strata.tokenize.validation_split");
  std::vector<bool> is_validation(documents);
  for (std::size_t i = 0; i < documents; ++i) {
    is_validation[i] = uniform_open01(hash_combine(key, i)) < val_fraction;
  }
  const auto chosen =
      static_cast<std::size_t>(std::count(is_validation.begin(), is_validation.end(), true));
  if (val_fraction > 0.0 && documents >= 2 && chosen == 0) is_validation.back() = true;
  if (documents > 0 && chosen == documents) is_validation.front() = false;
  return is_validation;
}

}  // namespace strata

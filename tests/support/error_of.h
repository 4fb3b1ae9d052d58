// error_of: the message of the strata::Error a piece of code throws, for tests of error messages.
// Header-only and free of other test helpers, so the tests that run inside mpirun use it too.
#pragma once

#include <string>

#include "model/core/error.h"

namespace strata::testing {

// The message of the strata::Error that `body` throws ("" if none).
template <class Body>
std::string error_of(Body body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace strata::testing

// Errors at boundaries (config, files, user input) are strata::Error exceptions carrying context;
// `main` turns them into one `error: ...` line and a non-zero exit.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates its arguments with operator<< into the message of a strata::Error.
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw Error(message.str());
}

// An error that every rank of a job raises at once with the same message, because it follows
// from values all ranks share (a global gradient norm, a collective write's outcome): `main` lets
// rank 0 report it and every rank exit, with no job abort, since no rank is left waiting.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

template <class... Parts>
[[noreturn]] void fail_together(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw CollectiveError(message.str());
}

}  // namespace strata

// Internal invariants (not user input): names the condition, file and line.
#define STRATA_CHECK(condition, ...)                                                     \
  do {                                                                                   \
    if (!(condition))                                                                    \
      ::strata::fail("internal check failed: " #condition " at " __FILE__ ":", __LINE__, \
                     " " __VA_OPT__(, __VA_ARGS__));                                     \
  } while (0)

// Internal to plan/config_validate*.cpp: the helpers every rule is written with, and the rules
// that live in files of their own.
#pragma once

#include "plan/config.h"
#include "plan/config_fields.h"

namespace strata::config_detail {

// Small helpers so that every rule reads as one line: the key, the bound, the value.
class Rules {
 public:
  explicit Rules(const ConfigSource& source) : source_(source) {}

  template <class T>
  void at_least(const char* path, T value, T min) const {
    if (value < min) source_.fail_key(path, "must be >= ", min, ", got ", value);
  }
  void positive(const char* path, double value) const {
    if (!(value > 0)) source_.fail_key(path, "must be > 0, got ", value);
  }
  // [0, 1): Adam betas and momentum; 1 would never forget the first gradient.
  void unit_interval(const char* path, double value) const {
    if (!(value >= 0 && value < 1)) source_.fail_key(path, "must be in [0, 1), got ", value);
  }
  template <class... Parts>
  [[noreturn]] void fail(const char* path, const Parts&... parts) const {
    source_.fail_key(path, parts...);
  }
  const ConfigSource& source() const { return source_; }

 private:
  const ConfigSource& source_;
};

// swarm.* (plan/config_validate_swarm.cpp).
void validate_swarm(const Config& c, const Rules& rules);
// precision.fp8* (plan/config_validate_fp8.cpp).
void validate_fp8(const Config& c, const Rules& rules);

}  // namespace strata::config_detail

// Memory figures of this process, for the metrics lines and the benchmarks (`peak_rss_mib` in
// <run>/metrics.jsonl and in `bench train`'s line).
#pragma once

namespace strata {

// Peak resident memory of this process so far, MiB (getrusage's ru_maxrss): host memory only,
// device memory is not resident here.
double peak_rss_mib();

}  // namespace strata

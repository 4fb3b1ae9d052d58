// cuDNN is loaded by `bench attention` when it first compares (dlopen of libcudnn.so.9), not
// linked: `bench` then starts on machines without cuDNN, where only that comparison is missing.
// bench_cudnn_loader.cpp defines the few cuDNN entry points the comparison calls, each forwarding
// to the loaded library (or failing with CUDNN_STATUS_NOT_INITIALIZED when it is absent).
#pragma once

#include <string>

namespace strata::bench {

// Whether libcudnn could be loaded; if not, `why` (may be null) gets the loader's reason.
bool cudnn_available(std::string* why);

}  // namespace strata::bench

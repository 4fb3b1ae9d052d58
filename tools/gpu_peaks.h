// Peak throughput of the GPUs Strata targets: the denominator of MFU on the CUDA backend
// (`bench train` on `device: cuda`, and the trainer's `mfu` once that backend lands).
//
// Figures are NVIDIA's datasheet numbers, dense (no 2:4 sparsity), in TFLOP/s:
//   bf16_dense   tensor-core bf16 with fp32 accumulation: the peak the MFU of a bf16/fp16 run is
//                measured against (fp16 tensor-core peaks are the same on these parts)
//   fp32         non-tensor fp32 (CUDA cores): the ceiling of kernels that do not use tensor cores
// Datasheets: A100 (SXM4 and PCIe alike: 312 / 19.5), H100 SXM5 (989 / 67), H100 PCIe (756 / 51),
// H100 NVL (835 / 60), H200 SXM (989 / 67), H200 NVL (835 / 60), GH200 (its H100/H200: 989 / 67).
// Boost clocks are assumed, so sustained MFU under power or thermal limits reads lower.
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

struct GpuPeak {
  const char* name;  // e.g. "H100 SXM"
  double bf16_dense_tflops;
  double fp32_tflops;
};

// A device name matches an entry when it contains every one of the entry's tokens as a word of its
// own (case-insensitive; not preceded by a letter or digit, not followed by a digit: "A100-SXM4"
// holds "A100", "RTX A1000" and "GH200" do not hold "A100" and "H200"). The first match wins, so
// variants (PCIe, NVL) come before the plain part name that would also match them.
struct GpuPeakEntry {
  std::array<const char*, 2> tokens;  // nullptr: no second token
  GpuPeak peak;
};

inline constexpr std::array<GpuPeakEntry, 7> kGpuPeaks{{
    {{"H100", "PCIE"}, {"H100 PCIe", 756, 51}},
    {{"H100", "NVL"}, {"H100 NVL", 835, 60}},
    {{"H100", nullptr}, {"H100 SXM", 989, 67}},  // "NVIDIA H100 80GB HBM3" is the SXM5 part
    {{"H200", "NVL"}, {"H200 NVL", 835, 60}},
    {{"H200", nullptr}, {"H200", 989, 67}},
    {{"GH200", nullptr}, {"GH200", 989, 67}},
    {{"A100", nullptr}, {"A100", 312, 19.5}},
}};

// Whether upper-case `name` holds upper-case `token` as a word of its own (see above).
inline bool holds_device_token(std::string_view name, std::string_view token) {
  const auto is_alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  const auto is_digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  for (auto at = name.find(token); at != std::string_view::npos; at = name.find(token, at + 1)) {
    const auto end = at + token.size();
    if ((at == 0 || !is_alnum(name[at - 1])) && (end == name.size() || !is_digit(name[end])))
      return true;
  }
  return false;
}

// The peak of a CUDA device, from its name as cudaGetDeviceProperties / nvidia-smi report it
// ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H200"); nullopt for a GPU not in
// the table (then MFU needs an explicit peak).
inline std::optional<GpuPeak> gpu_peak_for_device(std::string_view device_name) {
  std::string name(device_name);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (const GpuPeakEntry& entry : kGpuPeaks) {
    const bool all_found = std::all_of(entry.tokens.begin(), entry.tokens.end(), [&](auto token) {
      return token == nullptr || holds_device_token(name, token);
    });
    if (all_found) return entry.peak;
  }
  return std::nullopt;
}

}  // namespace strata

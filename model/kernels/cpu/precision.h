// Emulated reduced precision (docs/ARCHITECTURE.md §6): the CPU backend stores weights copies,
// activations and activation gradients as fp32 values that are exactly representable in the compute
// dtype, by rounding at the points where a CUDA kernel would write bf16/fp16 to memory. GEMMs and
// reductions still accumulate in fp32, as tensor cores do, so the CPU path reproduces the numerics
// that matter for mixed precision: lost mantissa bits, fp16's narrow range (overflow to ±inf at
// 65520, subnormals below 2^-14) and hence loss scaling, without a GPU.
//
// Rounding is IEEE 754 round-to-nearest-even, with overflow to ±inf, subnormals kept (fp16 down to
// 2^-24, bf16 down to 2^-133) and NaN kept NaN.
//   bf16: 8 significant bits, fp32's exponent range (largest finite 0x1.fep127 ≈ 3.39e38)
//   fp16: 11 significant bits, exponents −14..15 (largest finite 65504)
#pragma once

#include <string_view>

#include "model/core/choice.h"

namespace strata::cpu {

enum class ComputeDtype { fp32, bf16, fp16 };
inline constexpr Choices kComputeDtypeChoices{std::array{ChoiceWord{ComputeDtype::fp32, "fp32"},
                                                         ChoiceWord{ComputeDtype::bf16, "bf16"},
                                                         ChoiceWord{ComputeDtype::fp16, "fp16"}}};

// "fp32" | "bf16" | "fp16" (the words of precision.compute); anything else is an Error.
ComputeDtype compute_dtype_from_name(std::string_view name);
const char* compute_dtype_name(ComputeDtype dtype);

// The value of `x` rounded to the nearest bf16 / fp16 value (bit manipulation; the fast path).
float round_to_bf16(float x);
float round_to_fp16(float x);

// The same rounding for any double by arithmetic on the significand (frexp / nearbyint): the
// reference the fast path is tested against, and the rounding of Gpt<double>.
double round_to_format(double x, int significant_bits, int min_exponent, double max_finite);

// data[0..n) = its values rounded to `dtype`, in place; fp32 leaves them untouched (also for
// double data: a Gpt<double> in fp32 mode is the full-precision reference).
void round_to_dtype(float* data, long n, ComputeDtype dtype);
void round_to_dtype(double* data, long n, ComputeDtype dtype);

// The same on the calling thread only: for kernels that round each row they write inside their
// own parallel loop (round_to_dtype splits its range over the threads with these).
void round_span(float* data, long n, ComputeDtype dtype);
void round_span(double* data, long n, ComputeDtype dtype);

}  // namespace strata::cpu

// The element types a host collective carries (model/core/collectives.h,
// parallel/comm/communicator.h), as a value: backends implement one type-erased function per
// operation and switch on DataType where the transport needs it (MPI_Datatype, a typed sum);
// callers keep typed pointers and the typed entry points map the C++ type to its DataType at
// compile time.
//
// The set is closed on purpose: a type outside it does not compile at the call site, rather than
// travel as bytes that a sum would misread. Adding one is an enumerator, its C++ type in
// visit_data_type, CollectivePayload and data_type_of below, and its case in each backend's
// mapping (mpi_type in parallel/comm/mpi_communicator.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace strata {

enum class DataType { f32, f64, i8, u8, i32, i64 };

// Back from the value to the type, for code that must compute on the elements (a sum in a test
// group, a reference): calls `visit(T{})` with the C++ type of `type`.
template <class Visit>
constexpr decltype(auto) visit_data_type(DataType type, Visit&& visit) {
  switch (type) {
    case DataType::f32:
      return visit(float{});
    case DataType::f64:
      return visit(double{});
    case DataType::i8:
      return visit(std::int8_t{});
    case DataType::u8:
      return visit(std::uint8_t{});
    case DataType::i32:
      return visit(std::int32_t{});
    case DataType::i64:
      break;
  }
  return visit(std::int64_t{});  // i64: the switch covers the others
}

// Bytes per element: what the byte accounting of parallel/comm/communicator.h multiplies counts by.
constexpr std::size_t size_of(DataType type) {
  return visit_data_type(type, [](auto zero) { return sizeof zero; });
}

// The C++ types of the set. int8_t and uint8_t are signed and unsigned char, so plain `char`
// (a std::string's bytes) is not among them: callers say which byte they mean.
template <class T>
concept CollectivePayload = std::is_same_v<T, float> || std::is_same_v<T, double> ||
    std::is_same_v<T, std::int8_t> || std::is_same_v<T, std::uint8_t> ||
    std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>;

// The payloads a collective may sum: all but the bytes. Open MPI 4.1's vectorised (AVX) reductions
// saturate 8-bit sums where its scalar loop and NCCL wrap, so one call's result would depend on
// the count and the transport (measured here: a uint8 reduce-scatter over 8 ranks returned 255
// where the wrapped sum was 220; open-mpi/ompi#8045, closed as won't fix). Bytes are moved, never
// summed; a caller that needs their sum widens them first.
template <class T>
concept SummablePayload = CollectivePayload<T> && sizeof(T) >= 4;

constexpr bool summable(DataType type) { return size_of(type) >= 4; }

template <CollectivePayload T>
constexpr DataType data_type_of() {
  if constexpr (std::is_same_v<T, float>)
    return DataType::f32;
  else if constexpr (std::is_same_v<T, double>)
    return DataType::f64;
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return DataType::i8;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return DataType::u8;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DataType::i32;
  else
    return DataType::i64;
}

}  // namespace strata

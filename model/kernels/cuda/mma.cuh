// Warp-level tensor-core building blocks for sm_80 and later (include from .cu files only): the
// m16n8k16 matrix product with fp32 accumulation, ldmatrix loads of its operands from shared
// memory, asynchronous 16-byte copies from global to shared memory, and packing of two fp32
// values into one bf16/fp16 pair register. Written with inline PTX because the register layout of
// each fragment must be known to the code that uses it (WMMA leaves it unspecified): the
// attention kernels turn an accumulator into the next product's operand without leaving registers.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4 and
// t = lane % 4; a register holding two 16-bit elements keeps the lower column in its low half:
//   A (16 × 16, row-major): a[0] = A[g][2t, 2t+1],   a[1] = A[g+8][2t, 2t+1],
//                           a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
//   B (16 × 8):             b[0] = B[2t, 2t+1][g],   b[1] = B[2t+8, 2t+9][g]
//   C (16 × 8, fp32):       c[0..1] = C[g][2t, 2t+1], c[2..3] = C[g+8][2t, 2t+1]
// so the accumulators of two adjacent 16 × 8 products (columns 0-7 and 8-15) are, packed to
// 16 bits, exactly an A fragment of the 16 × 16 matrix they form (pack_a_fragment).
//
// ldmatrix (m8n8.x4): lane l supplies the address of row l % 8 of matrix l / 8; register i
// receives matrix i's elements [l / 4][2(l % 4), +1], or with .trans its elements
// [2(l % 4), +1][l / 4] (the transpose).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <type_traits>

namespace strata::cuda::mma {

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes from global `src` to shared `dst`, asynchronously; when !valid, `dst` is zero-filled
// and `src` (which must still be a valid address) is not read. Completion: commit_copies() then
// wait_copies<N>(), then a barrier before other threads read `dst`.
__device__ __forceinline__ void copy_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
               "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void commit_copies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8 × 8 matrices of 16-bit elements; `row` is this lane's row address (see the header).
__device__ __forceinline__ void load_matrices(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row))
               : "memory");
}

// The same, each matrix transposed.
__device__ __forceinline__ void load_matrices_transposed(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row))
               : "memory");
}

// c += A · B for one 16 × 8 × 16 product; T is __nv_bfloat16 or __half.
template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                          unsigned b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __half>, "mma_16816 takes bf16 or fp16 operands");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// (lo, hi) rounded to nearest even in T and packed, lo in the low half.
template <class T>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  unsigned bits;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&bits, &pair, sizeof bits);
  } else {
    const __half2 pair = __floats2half2_rn(lo, hi);
    std::memcpy(&bits, &pair, sizeof bits);
  }
  return bits;
}

// The A fragment of the 16 × 16 matrix whose columns 0-7 are accumulator `left` and 8-15 `right`.
template <class T>
__device__ __forceinline__ void pack_a_fragment(unsigned (&a)[4], const float (&left)[4],
                                                const float (&right)[4]) {
  a[0] = pack2<T>(left[0], left[1]);
  a[1] = pack2<T>(left[2], left[3]);
  a[2] = pack2<T>(right[0], right[1]);
  a[3] = pack2<T>(right[2], right[3]);
}

// A fragment of rows [row0, row0 + 16) and columns [col0, col0 + 16) of a row-major shared tile
// with leading dimension `ld` elements (16-byte aligned rows).
template <class T>
__device__ __forceinline__ void load_a_fragment(unsigned (&a)[4], const T* tile, int ld, int row0,
                                                int col0, int lane) {
  const int matrix = lane / 8, r = lane % 8;
  load_matrices(a, tile + (row0 + r + 8 * (matrix & 1)) * ld + col0 + 8 * (matrix >> 1));
}

// B fragments of two adjacent 16 × 8 products where B(k, n) = tile[n][k] (the tile holds Bᵀ
// row-major, as K does for Q·Kᵀ): k in [k0, k0 + 16), n in [n0, n0 + 16); b[0], b[1] serve columns
// n0..n0+7 and b[2], b[3] columns n0+8..n0+15.
template <class T>
__device__ __forceinline__ void load_b_fragments_rows_n(unsigned (&b)[4], const T* tile, int ld,
                                                        int k0, int n0, int lane) {
  const int matrix = lane / 8, r = lane % 8;
  load_matrices(b, tile + (n0 + r + 8 * (matrix >> 1)) * ld + k0 + 8 * (matrix & 1));
}

// B fragments of two adjacent 16 × 8 products where B(k, n) = tile[k][n] (the tile holds B
// row-major, as V does for P·V): k in [k0, k0 + 16), n in [n0, n0 + 16); b[0], b[1] serve columns
// n0..n0+7 and b[2], b[3] columns n0+8..n0+15.
template <class T>
__device__ __forceinline__ void load_b_fragments_rows_k(unsigned (&b)[4], const T* tile, int ld,
                                                        int k0, int n0, int lane) {
  const int matrix = lane / 8, r = lane % 8;
  load_matrices_transposed(b, tile + (k0 + r + 8 * (matrix & 1)) * ld + n0 + 8 * (matrix >> 1));
}

}  // namespace strata::cuda::mma

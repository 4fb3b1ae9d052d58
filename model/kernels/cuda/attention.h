// Causal self-attention with grouped key/value heads, fused flash-style (FlashAttention-2
// algorithm), on the packed qkv layout of model/kernels/cpu/attention.h (docs/ARCHITECTURE.md §5):
// NH query heads over KV key/value heads (NH % KV == 0; KV == NH is multi-head attention), a qkv
// row [q: NH·hs | k: KV·hs | v: KV·hs] (stride C3 = (NH + 2·KV)·hs, hs = C / NH), query head h
// reading key/value head h / (NH / KV); the scale is 1/√hs.
//
// No (T, T) matrix ever exists in device memory. The forward pass keeps, per query tile, the
// scores of one key tile in shared memory and an online softmax (running max and sum per row), and
// stores only the output and the logsumexp of each row. The backward pass recomputes the
// probabilities from qkv and the logsumexp.
//
// Kernels (attention_kernels.h): bf16/fp16 run the register kernels by default (each warp's
// scores, probabilities and accumulators in registers, mma.sync m16n8k16 with fp32 accumulation);
// the older tile kernels (score tiles in shared memory, WMMA) stay selectable for comparison
// (set_attention_kernels, or STRATA_ATTENTION_KERNELS=tiles in the environment). fp32 always uses
// the tile kernels' FMA path (tested against the CPU to 1e-5). Head sizes: the multiples of 16 up
// to 128; any T (partial tiles are zero-filled and masked).
//
// Deterministic: the backward pass runs two kernels instead of atomics: one per (key tile,
// key/value head) accumulating dK and dV over the query tiles below it of every query head in the
// group, one per (query tile, query head) accumulating dQ over the key tiles before it; each
// recomputes the scores it needs (about 1.4× the matmul work of an atomic dQ, no reduction-order
// noise). With KV < NH the dK/dV grid has NH / KV times fewer blocks, each NH / KV times longer.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "model/kernels/attention_pair.h"
#include "model/kernels/cuda/arena.h"

namespace strata::cuda {

// Whether attention_forward/backward support head size hs = C / NH.
bool attention_head_size_supported(int hs);

// Which kernels run bf16/fp16 attention in this process (fp32 always runs the tile kernels).
// The default comes from STRATA_ATTENTION_KERNELS (`registers` or `tiles`; unset: registers; any
// other value is an error at the first call).
enum class AttentionKernels { registers, tiles };
void set_attention_kernels(AttentionKernels kernels);
AttentionKernels attention_kernels();

// qkv (B, T, C3) -> out (B, T, C) overwritten; lse (B, NH, T) = log Σ_s≤t exp(q_t·k_s / √hs) per
// query row (natural log, fp32), kept for the backward pass. qkv and out 16-byte aligned.
// T: float, __nv_bfloat16, __half.
template <class T>
void attention_forward(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int KV,
                       cudaStream_t stream);

// dqkv (B, T, C3) overwritten, in qkv's layout, from dout (B, T, C), the forward's qkv, out and
// lse; a key/value head's dK and dV are the sums over its group's query heads. Scratch: B·NH·T
// floats (rowsum(dout ⊙ out)) from `arena`, released before returning.
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int B,
                        int T_, int C, int NH, int KV, DeviceArena& arena, cudaStream_t stream);

// Context parallelism's chunk pairs (model/kernels/attention_pair.h; the CPU's attention_chunk_*,
// model/kernels/cpu/attention.h): `pair`'s Tq query rows against its Tk key rows of B sequences in
// strided tensors, query t seeing key s iff s ≤ t + causal_offset, causal_offset ≥ 0 (so every
// row sees a key). The packed calls above are the pair of a sequence with itself
// (packed_attention_pair) and run the same kernels. Base pointers 16-byte aligned and every stride
// a multiple of 16 bytes.
// out (q's rows, out's strides) and lse (the statistics') overwritten.
template <class T>
void attention_pair_forward(T* out, float* lse, const T* q, const T* k, const T* v,
                            const AttentionPair& pair, cudaStream_t stream);
// delta = rowsum(dout ⊙ out) of the query rows (the statistics' layout), in fp32.
template <class T>
void attention_pair_delta(float* delta, const T* dout, const T* out, const AttentionPair& pair,
                          cudaStream_t stream);
// dq (q's strides), dk and dv (kv's) += the pair's gradients from the rows' merged lse and delta
// (every pair of a query chunk shares them), each sum in fp32 rounded to T once.
template <class T>
void attention_pair_backward(T* dq, T* dk, T* dv, const T* dout, const float* lse,
                             const float* delta, const T* q, const T* k, const T* v,
                             const AttentionPair& pair, cudaStream_t stream);

}  // namespace strata::cuda

// Context parallelism's merge of two partial attentions on the GPU, the CPU's attention_merge
// (model/kernels/cpu/attention.h) with the same arguments' meaning: out and lse hold one partial
// attention of B·Tq query rows over NH heads of size hs, `part` and part_lse another over other
// keys; out and lse become the attention over both, by attention_merge_weights
// (model/kernels/attention_merge.h, the arithmetic both backends run). One thread per (sequence,
// head, row): it reads the two lse, writes the merged one after its hs values (so no thread reads
// an lse another has already replaced), and computes each value in fp32 from the two inputs,
// rounded to T once.
//
// Strides in elements: out and part (b, t, h·hs + d) at b·out_batch + t·out_row + h·hs + d; lse and
// part_lse (fp32) (b, h, t) at b·stat_batch + h·stat_head + t. T: float, __nv_bfloat16, __half.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace strata::cuda {

struct AttentionMergeShape {
  int B = 0, Tq = 0, NH = 0, hs = 0;
  long out_row = 0, out_batch = 0;
  long stat_head = 0, stat_batch = 0;
};

template <class T>
void attention_merge(T* out, float* lse, const T* part, const float* part_lse,
                     const AttentionMergeShape& shape, cudaStream_t stream);

}  // namespace strata::cuda

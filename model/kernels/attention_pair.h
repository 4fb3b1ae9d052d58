// One query chunk against one key/value chunk of the same B sequences: what context parallelism's
// attention runs pair by pair (model/context_attention.h), and what the ops' pair calls
// (model/ops/ops.h) and the CUDA kernels (model/kernels/cuda/attention.h) take; the CPU kernels'
// AttentionChunk with its strided views (model/kernels/cpu/attention.h) is the same geometry.
// Query row t sees key row s iff s ≤ t + causal_offset. Strides in elements: q and dq step by
// q_row and q_batch (a packed qkv's rows); out, part and dout by out_row and out_batch; k, v, dk
// and dv by kv_row and kv_batch (k and v of one buffer may interleave); lse, part_lse and delta
// hold (b, h, t) at b·stat_batch + h·stat_head + t. Query head h reads key/value head h / (NH /
// KV).
#pragma once

namespace strata {

struct AttentionPair {
  int B = 0, Tq = 0, Tk = 0;
  int NH = 0, KV = 0, hs = 0;
  long causal_offset = 0;
  long q_row = 0, q_batch = 0;
  long out_row = 0, out_batch = 0;
  long kv_row = 0, kv_batch = 0;
  long stat_head = 0, stat_batch = 0;
};

// The packed layout of model/kernels/cpu/attention.h as a pair: B sequences of T rows
// [q: NH·hs | k: KV·hs | v: KV·hs] attending to themselves (offset 0), out (B, T, NH·hs) and the
// statistics (B, NH, T); its k and v are the columns from NH·hs and (NH + KV)·hs of the qkv rows.
inline AttentionPair packed_attention_pair(int B, int T, int NH, int KV, int hs) {
  const long C = static_cast<long>(NH) * hs, C3 = C + 2L * KV * hs;
  AttentionPair p;
  p.B = B;
  p.Tq = p.Tk = T;
  p.NH = NH;
  p.KV = KV;
  p.hs = hs;
  p.q_row = p.kv_row = C3;
  p.q_batch = p.kv_batch = T * C3;
  p.out_row = C;
  p.out_batch = T * C;
  p.stat_head = T;
  p.stat_batch = static_cast<long>(NH) * T;
  return p;
}

}  // namespace strata

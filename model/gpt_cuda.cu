// Status: ran on an NVIDIA H200 (2026-11-26): every `cuda` test passed (docs/PERFORMANCE.md).
#include "model/gpt_cuda.h"

#include <algorithm>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cuda/attention.h"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/crossentropy.h"
#include "model/kernels/cuda/embedding.h"
#include "model/kernels/cuda/layernorm.h"
#include "model/kernels/cuda/matmul.h"
#include "model/kernels/cuda/residual.h"

namespace strata::cuda {

// Carves typed arrays out of one reservation at the arena's alignment. Run once without a base
// to measure the reservation, then again over it.
class BufferCarver {
 public:
  explicit BufferCarver(char* base = nullptr) : base_(base) {}
  template <class U>
  U* take(std::size_t count) {
    constexpr std::size_t align = DeviceArena::kDefaultAlignment;
    // Nothing for an empty array: a pointer there would alias the next one.
    U* p = base_ == nullptr || count == 0 ? nullptr : reinterpret_cast<U*>(base_ + used_);
    used_ += (count * sizeof(U) + align - 1) / align * align;
    return p;
  }
  std::size_t used() const { return used_; }

 private:
  char* base_;
  std::size_t used_ = 0;
};

namespace {

__global__ void fill_kernel(float* out, float value, long n) {
  const long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

void fill(float* out, float value, long n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  fill_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      out, value, n);
  STRATA_CUDA_CHECK_LAUNCH();
}

// Kernel scratch (LayerNorm and bias column sums, the embedding sort, attention's row sums): a
// few MiB at GPT-2 sizes; 64 MiB plus 256 bytes per row leaves ample room.
std::size_t scratch_bytes(std::size_t rows) { return (std::size_t{64} << 20) + 256 * rows; }

}  // namespace

// Sizes derived from the shape and the partition: N = B·T rows (max_batch sequences), Nr the
// rows of the residual stream on this rank (N / tp with sequence parallelism), Cl = C / tp
// attention channels, Hl = 4C / tp MLP channels, NHl heads and Vl vocabulary rows of this rank.
template <class T>
struct CudaGpt<T>::Dims {
  std::size_t L, C, Cl, Hl, NHl, Vl, N, Nr;
  bool sp, embedding, head;
  std::size_t slots;
};

template <class T>
typename CudaGpt<T>::Dims CudaGpt<T>::dims_of(const GptShape& shape, const ModelPartition& p,
                                              int max_batch, int slots) {
  const std::size_t tp = static_cast<std::size_t>(p.tp_size);
  Dims d{};
  d.L = static_cast<std::size_t>(p.layers());
  d.C = static_cast<std::size_t>(shape.d_model);
  d.Cl = d.C / tp;
  d.Hl = 4 * d.C / tp;
  d.NHl = static_cast<std::size_t>(shape.n_head) / tp;
  d.Vl = static_cast<std::size_t>(shape.padded_vocab()) / tp;
  d.N = static_cast<std::size_t>(max_batch) * shape.seq_len;
  d.sp = p.sequence_parallel && p.tp_size > 1;
  d.Nr = d.sp ? d.N / tp : d.N;
  d.embedding = p.has_embedding;
  d.head = p.has_head;
  d.slots = static_cast<std::size_t>(slots);
  return d;
}

template <class T>
typename CudaGpt<T>::Dims CudaGpt<T>::dims() const {
  return dims_of(shape_, partition_, max_batch_, slots());
}

// One block's activations: into a slot's kept per-layer arrays or, for what recomputation drops,
// the one-layer workspace. Row counts as in Dims.
template <class T>
struct CudaGpt<T>::Layer {
  const T* x;                  // block input (Nr, C): the residual stream, always kept
  T* out;                      // block output (Nr, C)
  T *ln1, *x2, *ln2;           // (Nr, C)
  T *ln1_full, *ln2_full;      // (N, C) gathered rows; null without sequence parallelism
  float *ln1_mean, *ln1_rstd;  // (Nr)
  float *ln2_mean, *ln2_rstd;  // (Nr)
  T *fch, *fch_gelu;           // (N, Hl) pre-activation and GELU
  T *qkv, *atty;               // (N, 3Cl), (N, Cl)
  float* lse;                  // (B, NHl, T) logsumexp per query row
};

// Per-layer arrays (a count of layers of each: 0 where recomputation drops them).
template <class T>
struct GptLayerArrays {
  T *ln1 = nullptr, *x2 = nullptr, *ln2 = nullptr, *fch = nullptr, *fch_gelu = nullptr;
  T *ln1_full = nullptr, *ln2_full = nullptr;
  float *ln1_mean = nullptr, *ln1_rstd = nullptr, *ln2_mean = nullptr, *ln2_rstd = nullptr;
  T *qkv = nullptr, *atty = nullptr;
  float* lse = nullptr;

  // `rest_layers` layers of what `full` drops, `attention_layers` of what `selective` drops.
  template <class D>
  void carve(BufferCarver& c, std::size_t rest_layers, std::size_t attention_layers, const D& d) {
    const std::size_t full_rows = d.sp ? rest_layers * d.N * d.C : 0;
    ln1 = c.take<T>(rest_layers * d.Nr * d.C);
    x2 = c.take<T>(rest_layers * d.Nr * d.C);
    ln2 = c.take<T>(rest_layers * d.Nr * d.C);
    ln1_full = c.take<T>(full_rows);
    ln2_full = c.take<T>(full_rows);
    ln1_mean = c.take<float>(rest_layers * d.Nr);
    ln1_rstd = c.take<float>(rest_layers * d.Nr);
    ln2_mean = c.take<float>(rest_layers * d.Nr);
    ln2_rstd = c.take<float>(rest_layers * d.Nr);
    fch = c.take<T>(rest_layers * d.N * d.Hl);
    fch_gelu = c.take<T>(rest_layers * d.N * d.Hl);
    qkv = c.take<T>(attention_layers * d.N * 3 * d.Cl);
    atty = c.take<T>(attention_layers * d.N * d.Cl);
    lse = c.take<float>(attention_layers * d.N * d.NHl);  // (B, NHl, T)
  }
};

// What one micro-batch keeps from its forward to its backward, and where it stands.
template <class T>
struct CudaGpt<T>::Slot {
  std::int32_t *tokens = nullptr, *targets = nullptr;  // (N) device copies
  T* residual = nullptr;   // (L+1, Nr, C): block inputs, then the stage output
  GptLayerArrays<T> kept;  // what recomputation keeps, all layers
  T* lnf = nullptr;        // (Nr, C), last stage
  T* lnf_full = nullptr;   // (N, C) gathered rows, last stage with sequence parallelism
  float *lnf_mean = nullptr, *lnf_rstd = nullptr;  // (Nr)
  T* logits = nullptr;                             // (N, Vl): logits, then (trained) their gradient
  float* losses = nullptr;                         // (N)
  // (3, N) cross-entropy row statistics: max, Σ exp, target logit (kept for a later backward).
  float* ce_stats = nullptr;
  int batch = 0, time = 0;
  bool forwarded = false;    // a forward waits for its backward (or was an evaluation)
  bool has_targets = false;  // losses and ce_stats valid
};

// Shared by every slot: the recomputation workspace, the partial results of row-parallel layers
// before their sum, and the backward pass's gradients.
template <class T>
struct CudaGpt<T>::Buffers {
  GptLayerArrays<T> work;          // one layer of what recomputation drops
  T* recomputed_output = nullptr;  // (Nr, C) full recompute's block output
  T* partial = nullptr;            // (N, C) row-parallel output before [sum]; embedding partial
  T* reduced = nullptr;            // (Nr, C) its sum with sequence parallelism
  T* dres = nullptr;               // (Nr, C) running gradient of the residual stream
  T* dfull = nullptr;              // (N, C) gathered dres (sequence parallelism)
  T* dln = nullptr;                // (N, C) partial gradient of a LayerNorm output
  T* dln_local = nullptr;          // (Nr, C) its sum with sequence parallelism
  T* datty = nullptr;              // (N, Cl)
  T* dqkv = nullptr;               // (N, 3Cl)
  T* dfch = nullptr;               // (N, Hl)
  float* dlosses = nullptr;        // (N)
};

// Lays out every slot and the shared buffers (over `c`'s reservation, or only measuring it);
// returns the bytes of activations (the slots and the recompute workspace), which come first.
template <class T>
std::size_t CudaGpt<T>::carve(std::vector<Slot>& slots, Buffers& b, BufferCarver& c, const Dims& d,
                              Recompute recompute) {
  const bool keep_rest = recompute != Recompute::full;
  const bool keep_attention = recompute == Recompute::none;
  for (Slot& s : slots) {
    s.residual = c.take<T>((d.L + 1) * d.Nr * d.C);
    s.kept.carve(c, keep_rest ? d.L : 0, keep_attention ? d.L : 0, d);
    s.lnf = c.take<T>(d.head ? d.Nr * d.C : 0);
    s.lnf_full = c.take<T>(d.head && d.sp ? d.N * d.C : 0);
    s.lnf_mean = c.take<float>(d.head ? d.Nr : 0);
    s.lnf_rstd = c.take<float>(d.head ? d.Nr : 0);
    s.logits = c.take<T>(d.head ? d.N * d.Vl : 0);
  }
  b.work.carve(c, keep_rest ? 0 : 1, keep_attention ? 0 : 1, d);
  b.recomputed_output = c.take<T>(keep_rest ? 0 : d.Nr * d.C);
  const std::size_t activations = c.used();
  for (Slot& s : slots) {
    s.tokens = c.take<std::int32_t>(d.N);
    s.targets = c.take<std::int32_t>(d.N);
    s.losses = c.take<float>(d.head ? d.N : 0);
    s.ce_stats = c.take<float>(d.head ? 3 * d.N : 0);
  }
  b.partial = c.take<T>(d.N * d.C);
  b.reduced = c.take<T>(d.sp ? d.Nr * d.C : 0);
  b.dres = c.take<T>(d.Nr * d.C);
  b.dfull = c.take<T>(d.sp ? d.N * d.C : 0);
  b.dln = c.take<T>(d.N * d.C);
  b.dln_local = c.take<T>(d.sp ? d.Nr * d.C : 0);
  b.datty = c.take<T>(d.N * d.Cl);
  b.dqkv = c.take<T>(d.N * 3 * d.Cl);
  b.dfch = c.take<T>(d.N * d.Hl);
  b.dlosses = c.take<float>(d.N);
  return activations;
}

namespace {

ModelPartition checked_partition(const GptShape& shape, const ModelPartition& p, int max_batch,
                                 int slots) {
  STRATA_CHECK(shape.n_layer > 0 && shape.d_model % shape.n_head == 0 && slots >= 1 &&
               max_batch >= 1);
  STRATA_CHECK(shape.n_head % p.tp_size == 0 && shape.padded_vocab() % p.tp_size == 0,
               "tensor-parallel degree ", p.tp_size, " does not divide the heads and vocabulary");
  STRATA_CHECK(!p.sequence_parallel || (max_batch * shape.seq_len) % p.tp_size == 0,
               "sequence parallelism needs B·T divisible by tp");
  if (!attention_head_size_supported(shape.head_size()))
    fail("device cuda: head size ", shape.head_size(),
         " (d_model / n_head) has no attention kernel (a multiple of 16 up to 128)");
  return p;
}

}  // namespace

template <class T>
CudaGpt<T>::CudaGpt(DeviceContext& ctx, const GptShape& shape, int max_batch, Recompute recompute)
    : CudaGpt(ctx, shape, ModelPartition::whole(shape), nullptr, max_batch, 1, recompute) {}

template <class T>
std::size_t CudaGpt<T>::reservation_bytes(const Dims& d, Recompute recompute) {
  std::vector<Slot> slots(d.slots);
  Buffers unused;
  BufferCarver counter;
  carve(slots, unused, counter, d, recompute);
  return counter.used();
}

template <class T>
CudaGpt<T>::CudaGpt(DeviceContext& ctx, const GptShape& shape, const ModelPartition& partition,
                    Collectives* tp, int max_batch, int slots, Recompute recompute,
                    DeviceCollectives* device_tp)
    : ctx_(ctx),
      shape_(shape),
      partition_(checked_partition(shape, partition, max_batch, slots)),
      layout_(ParameterLayout::for_partition(shape, partition)),
      segments_(layout_.segments()),
      segment_(segment_index(segments_)),
      max_batch_(max_batch),
      recompute_(recompute),
      sequence_parallel_(partition.sequence_parallel && partition.tp_size > 1),
      activations_(reservation_bytes(dims_of(shape, partition, max_batch, slots), recompute)),
      scratch_(scratch_bytes(static_cast<std::size_t>(max_batch) * shape.seq_len)),
      slots_(static_cast<std::size_t>(slots)),
      buffers_(std::make_unique<Buffers>()) {
  const Dims d = dims();
  if (device_tp != nullptr) {
    tp_ = device_tp;
  } else if (partition.tp_size > 1) {
    STRATA_CHECK(tp != nullptr, "a tensor-parallel partition needs its group");
    staged_tp_ = std::make_unique<StagedCollectives>(*tp, d.N * d.C);
    tp_ = staged_tp_.get();
  }
  STRATA_CHECK(partition.tp_size == 1 || (tp_ != nullptr && tp_->size() == partition.tp_size &&
                                          tp_->rank() == partition.tp_rank),
               "the tensor-parallel group does not match the partition");
  // A group of one carries nothing: the model skips its collectives altogether.
  if (partition.tp_size == 1) tp_ = nullptr;
  BufferCarver carver(static_cast<char*>(activations_.allocate(activations_.capacity())));
  activation_bytes_ = carve(slots_, *buffers_, carver, d, recompute);
  // One block's share over all slots: its input (the residual stream) and what recomputation
  // keeps of it.
  std::size_t per_layer = d.Nr * d.C * sizeof(T);  // the block input
  if (recompute != Recompute::full) {
    per_layer += 3 * d.Nr * d.C * sizeof(T) + 2 * d.N * d.Hl * sizeof(T) + 4 * d.Nr * sizeof(float);
    if (d.sp) per_layer += 2 * d.N * d.C * sizeof(T);
  }
  if (recompute == Recompute::none)
    per_layer += 4 * d.N * d.Cl * sizeof(T) + d.N * d.NHl * sizeof(float);
  layer_bytes_ = d.L == 0 ? 0 : per_layer * d.slots;
  staging_ = PinnedBuffer<std::int32_t>(2 * d.N);
  // Last: the event is the one resource the destructor frees by hand, and the destructor does not
  // run when a constructor throws.
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&staging_free_, cudaEventDisableTiming));
}

template <class T>
CudaGpt<T>::~CudaGpt() {
  if (staging_free_ != nullptr) STRATA_CUDA_REPORT(cudaEventDestroy(staging_free_));
}

template <class T>
std::size_t CudaGpt<T>::device_bytes() const {
  const std::size_t staging = staged_tp_
                                  ? std::size_t{sizeof(float)} * max_batch_ * shape_.seq_len *
                                        static_cast<std::size_t>(shape_.d_model)
                                  : 0;
  return activations_.capacity() + scratch_.capacity() + staging;
}

template <class T>
int CudaGpt<T>::slots() const {
  return static_cast<int>(slots_.size());
}

template <class T>
int CudaGpt<T>::activation_rows(int B, int T_) const {
  return sequence_parallel_ ? B * T_ / partition_.tp_size : B * T_;
}

template <class T>
typename CudaGpt<T>::Slot& CudaGpt<T>::slot_for(int slot, int B, int T_) {
  STRATA_CHECK(slot >= 0 && slot < slots(), "activation slot ", slot, " out of range");
  STRATA_CHECK(B >= 1 && B <= max_batch_ && T_ >= 1 && T_ <= shape_.seq_len);
  STRATA_CHECK(!sequence_parallel_ || (B * T_) % partition_.tp_size == 0,
               "sequence parallelism needs B·T divisible by tp");
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  s.batch = B;
  s.time = T_;
  return s;
}

template <class T>
void CudaGpt<T>::upload_tokens(Slot& s, const std::int32_t* tokens, const std::int32_t* targets,
                               long N) {
  if (tokens != nullptr)
    for (long i = 0; i < N; ++i)
      STRATA_CHECK(tokens[i] >= 0 && tokens[i] < shape_.vocab_size, "token id out of range");
  if (targets != nullptr)
    for (long i = 0; i < N; ++i)
      STRATA_CHECK(targets[i] >= 0 && targets[i] < shape_.vocab_size, "target id out of range");
  // The previous copies out of the staging buffer must be done before it is overwritten.
  STRATA_CUDA_CHECK(cudaEventSynchronize(staging_free_));
  const long max_rows = static_cast<long>(max_batch_) * shape_.seq_len;
  if (tokens != nullptr) {
    std::copy_n(tokens, N, staging_.data());
    STRATA_CUDA_CHECK(cudaMemcpyAsync(s.tokens, staging_.data(), N * sizeof(std::int32_t),
                                      cudaMemcpyHostToDevice, ctx_.stream()));
  }
  if (targets != nullptr) {
    std::copy_n(targets, N, staging_.data() + max_rows);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(s.targets, staging_.data() + max_rows,
                                      N * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                                      ctx_.stream()));
  }
  STRATA_CUDA_CHECK(cudaEventRecord(staging_free_, ctx_.stream()));
}

template <class T>
typename CudaGpt<T>::Layer CudaGpt<T>::layer(const Slot& s, int l, bool recomputing) const {
  const Buffers& b = *buffers_;
  const Dims d = dims();
  const bool keep_rest = recompute_ != Recompute::full;
  const bool keep_attention = recompute_ == Recompute::none;
  const GptLayerArrays<T>& rest = keep_rest ? s.kept : b.work;
  const GptLayerArrays<T>& attn = keep_attention ? s.kept : b.work;
  const std::size_t r = keep_rest ? static_cast<std::size_t>(l) : 0;
  const std::size_t a = keep_attention ? static_cast<std::size_t>(l) : 0;
  const std::size_t rows = d.Nr * d.C, full = d.N * d.C;
  auto at = [](auto* base, std::size_t offset) { return base == nullptr ? base : base + offset; };
  Layer x{};
  x.x = s.residual + static_cast<std::size_t>(l) * rows;
  x.out = recomputing ? b.recomputed_output : s.residual + static_cast<std::size_t>(l + 1) * rows;
  x.ln1 = rest.ln1 + r * rows;
  x.x2 = rest.x2 + r * rows;
  x.ln2 = rest.ln2 + r * rows;
  x.ln1_full = at(rest.ln1_full, r * full);
  x.ln2_full = at(rest.ln2_full, r * full);
  x.ln1_mean = rest.ln1_mean + r * d.Nr;
  x.ln1_rstd = rest.ln1_rstd + r * d.Nr;
  x.ln2_mean = rest.ln2_mean + r * d.Nr;
  x.ln2_rstd = rest.ln2_rstd + r * d.Nr;
  x.fch = rest.fch + r * d.N * d.Hl;
  x.fch_gelu = rest.fch_gelu + r * d.N * d.Hl;
  x.qkv = attn.qkv + a * d.N * 3 * d.Cl;
  x.atty = attn.atty + a * d.N * d.Cl;
  x.lse = attn.lse + a * d.N * d.NHl;
  return x;
}

template <class T>
const T* CudaGpt<T>::sum_rows(T* partial, T* local_out, int N) {
  if (!tp_) return partial;
  const std::size_t C = static_cast<std::size_t>(shape_.d_model);
  if (!sequence_parallel_) {
    tp_->all_reduce_sum(partial, static_cast<std::size_t>(N) * C, ctx_.stream());
    return partial;
  }
  tp_->reduce_scatter_sum(partial, local_out, static_cast<std::size_t>(N / tp_->size()) * C,
                          ctx_.stream());
  return local_out;
}

template <class T>
const T* CudaGpt<T>::gather_rows(const T* local, T* full, int N) {
  if (!sequence_parallel_) return local;
  const std::size_t C = static_cast<std::size_t>(shape_.d_model);
  tp_->all_gather(local, full, static_cast<std::size_t>(N / tp_->size()) * C, ctx_.stream());
  return full;
}

// Parameter views, by name, into a segment of weights (T) or gradients (fp32) that starts at
// `base`, the segment's first element (what ParameterAccess hands out).
template <class T>
template <class P>
P* CudaGpt<T>::in_segment(P* base, int segment, const std::string& name) const {
  return base +
         (layout_.at(name).offset - segments_[static_cast<std::size_t>(segment)].range.begin);
}

template <class T>
template <class P>
P* CudaGpt<T>::in_block(P* base, int l, const char* tensor) const {
  return in_segment(base, block_segment(l),
                    "h." + std::to_string(partition_.layer_begin + l) + "." + tensor);
}

// The passes below only queue kernels: each release comes once the kernels that read a segment's
// weights (or add to its gradients) are queued on the compute stream, not once they have run. A
// ParameterAccess that frees, reuses or reduces a segment's memory on release must order that
// after them (work on the compute stream, or wait for an event recorded there); FlatParameters
// does nothing on release.
template <class T>
void CudaGpt<T>::embed(Slot& s, Parameters& parameters) {
  const int C = shape_.d_model, N = s.batch * s.time, Nr = activation_rows(s.batch, s.time);
  const TensorView& wte = layout_.at("wte");
  const int vocab_begin = static_cast<int>(wte.slice.mid_begin);
  const int Vl = static_cast<int>(wte.slice.mid_count);
  // Each rank looks up the tokens of its vocabulary rows (zeros elsewhere); the sum over the
  // group is the embedding. Without sequence parallelism straight into the residual stream.
  T* lookup = sequence_parallel_ ? buffers_->partial : s.residual;
  const T* wte_weights = parameters.acquire_weights(segment_.wte, WeightUse::forward);
  embedding_shard_forward(lookup, s.tokens, in_segment(wte_weights, segment_.wte, "wte"),
                          vocab_begin, Vl, N, C, ctx_.stream());
  parameters.release_weights(segment_.wte);
  const T* x = sum_rows(lookup, s.residual, N);
  STRATA_CHECK(x == s.residual);
  const long row_begin = sequence_parallel_ ? static_cast<long>(partition_.tp_rank) * Nr : 0;
  const T* wpe_weights = parameters.acquire_weights(segment_.wpe, WeightUse::forward);
  position_embedding_forward(s.residual, in_segment(wpe_weights, segment_.wpe, "wpe"), row_begin,
                             Nr, s.time, C, ctx_.stream());
  parameters.release_weights(segment_.wpe);
}

// ln1 (all N rows) → qkv (N, 3Cl) → attention output (N, Cl) and logsumexp: what selective
// recomputation reruns (from the kept ln1 rows, no communication), one function for both.
template <class T>
void CudaGpt<T>::attention_core_forward(const Layer& a, const T* w, int l, int B, int T_,
                                        const T* ln1_full) {
  const int C = shape_.d_model, tp = partition_.tp_size, N = B * T_;
  const int Cl = C / tp;
  matmul_forward(ctx_, a.qkv, static_cast<T*>(nullptr), ln1_full, in_block(w, l, "attn.qkv.weight"),
                 in_block(w, l, "attn.qkv.bias"), N, C, 3 * Cl);
  attention_forward(a.atty, a.lse, a.qkv, B, T_, Cl, shape_.n_head / tp, ctx_.stream());
}

template <class T>
void CudaGpt<T>::block_forward(const Layer& a, const T* w, int l, int B, int T_) {
  const int C = shape_.d_model, tp = partition_.tp_size, N = B * T_;
  const int Nr = activation_rows(B, T_), Cl = C / tp, Hl = 4 * C / tp;
  auto p = [&](const char* name) { return in_block(w, l, name); };
  cudaStream_t stream = ctx_.stream();
  T* partial = buffers_->partial;
  // Attention: x2 = x + [sum](proj(attn(qkv(ln1(x))))) + b, then ln2 = LN(x2) in the same kernel.
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.x, p("ln1.weight"), p("ln1.bias"), Nr, C,
                    stream);
  attention_core_forward(a, w, l, B, T_, gather_rows(a.ln1, a.ln1_full, N));
  matmul_forward(ctx_, partial, static_cast<T*>(nullptr), a.atty, p("attn.proj.weight"),
                 static_cast<const T*>(nullptr), N, Cl, C);
  const T* y = sum_rows(partial, buffers_->reduced, N);
  residual_layernorm_forward(a.x2, a.ln2, a.ln2_mean, a.ln2_rstd, a.x, y, p("attn.proj.bias"),
                             p("ln2.weight"), p("ln2.bias"), Nr, C, stream);
  // MLP: out = x2 + [sum](proj(gelu(fc(ln2)))) + b, GELU in the fc GEMM's epilogue.
  const T* ln2_full = gather_rows(a.ln2, a.ln2_full, N);
  matmul_forward(ctx_, a.fch_gelu, a.fch, ln2_full, p("mlp.fc.weight"), p("mlp.fc.bias"), N, C, Hl);
  matmul_forward(ctx_, partial, static_cast<T*>(nullptr), a.fch_gelu, p("mlp.proj.weight"),
                 static_cast<const T*>(nullptr), N, Hl, C);
  const T* z = sum_rows(partial, buffers_->reduced, N);
  residual_bias_forward(a.out, a.x2, z, p("mlp.proj.bias"), Nr, C, stream);
}

template <class T>
void CudaGpt<T>::head_forward(Slot& s, Parameters& parameters) {
  const int C = shape_.d_model, N = s.batch * s.time, Nr = activation_rows(s.batch, s.time);
  const TensorView& wte = layout_.at("wte");
  const T* x = stage_residual_output(s);
  const T* lnf = parameters.acquire_weights(segment_.lnf, WeightUse::forward);
  layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, x, in_segment(lnf, segment_.lnf, "lnf.weight"),
                    in_segment(lnf, segment_.lnf, "lnf.bias"), Nr, C, ctx_.stream());
  parameters.release_weights(segment_.lnf);
  const T* lnf_full = gather_rows(s.lnf, s.lnf_full, N);  // (N, C)
  // The head is tied to wte: logits (N, Vl) = lnf · wte_shardᵀ.
  const T* wte_weights = parameters.acquire_weights(segment_.wte, WeightUse::forward);
  matmul_forward(ctx_, s.logits, static_cast<T*>(nullptr), lnf_full,
                 in_segment(wte_weights, segment_.wte, "wte"), static_cast<const T*>(nullptr), N, C,
                 static_cast<int>(wte.slice.mid_count));
  parameters.release_weights(segment_.wte);
}

template <class T>
void CudaGpt<T>::cross_entropy(Slot& s, float fused_scale) {
  const int N = s.batch * s.time, V = shape_.vocab_size;
  const TensorView& wte = layout_.at("wte");
  const int vocab_begin = static_cast<int>(wte.slice.mid_begin);
  const int Vl = static_cast<int>(wte.slice.mid_count);
  Buffers& b = *buffers_;
  cudaStream_t stream = ctx_.stream();
  const bool fused = fused_scale > 0;
  float *row_max = s.ce_stats, *sum_exp = s.ce_stats + N, *target_logit = s.ce_stats + 2 * N;
  // d(scale · mean)/d(loss_n) = scale / N.
  if (fused) fill(b.dlosses, fused_scale / static_cast<float>(N), N, stream);
  if (!tp_) {  // one shard: online softmax in one pass over each row
    if (fused)
      softmax_crossentropy_forward_backward(s.losses, s.logits, s.logits, s.targets, b.dlosses, N,
                                            V, Vl, stream);
    else
      softmax_crossentropy_stats(s.losses, row_max, sum_exp, target_logit, s.logits, s.targets, N,
                                 V, Vl, stream);
    return;
  }
  // Shards: global row maxima, then global sums of exp and target logits, then the rest.
  crossentropy_shard_max(row_max, s.logits, vocab_begin, V, N, Vl, stream);
  tp_->all_reduce_max(row_max, static_cast<std::size_t>(N), stream);
  crossentropy_shard_sums(sum_exp, target_logit, s.logits, s.targets, row_max, vocab_begin, V, N,
                          Vl, stream);
  tp_->all_reduce_sum(sum_exp, 2 * static_cast<std::size_t>(N), stream);  // and target_logit
  if (fused)
    crossentropy_shard_finish_backward(s.losses, s.logits, s.logits, s.targets, b.dlosses, row_max,
                                       sum_exp, target_logit, vocab_begin, V, N, Vl, stream);
  else
    crossentropy_losses(s.losses, row_max, sum_exp, target_logit, N, stream);
}

// The blocks of a forward pass, each segment's weights acquired around its kernels.
template <class T>
void CudaGpt<T>::blocks_forward(Slot& s, Parameters& parameters) {
  for (int l = 0; l < partition_.layers(); ++l) {
    const T* weights = parameters.acquire_weights(block_segment(l), WeightUse::forward);
    block_forward(layer(s, l, false), weights, l, s.batch, s.time);
    parameters.release_weights(block_segment(l));
  }
}

template <class T>
void CudaGpt<T>::forward(int slot, Parameters& parameters, const std::int32_t* tokens,
                         const std::int32_t* targets, int B, int T_) {
  Slot& s = slot_for(slot, B, T_);
  const bool has_head = partition_.has_head;
  if (partition_.has_embedding) STRATA_CHECK(tokens != nullptr, "the first stage needs tokens");
  upload_tokens(s, partition_.has_embedding ? tokens : nullptr, has_head ? targets : nullptr,
                static_cast<long>(B) * T_);
  if (partition_.has_embedding) embed(s, parameters);
  blocks_forward(s, parameters);
  if (has_head) head_forward(s, parameters);
  s.forwarded = true;
  s.has_targets = has_head && targets != nullptr;
  if (s.has_targets) cross_entropy(s, 0);  // losses and row statistics; the logits stay
}

template <class T>
void CudaGpt<T>::forward_backward(Parameters& parameters, const std::int32_t* tokens,
                                  const std::int32_t* targets, int B, int T_, float loss_scale) {
  STRATA_CHECK(partition_.has_embedding && partition_.has_head,
               "forward_backward runs a whole pipeline; stages use forward and backward");
  STRATA_CHECK(targets != nullptr, "training needs targets");
  STRATA_CHECK(loss_scale > 0, "the loss scale must be positive");
  Slot& s = slot_for(0, B, T_);
  upload_tokens(s, tokens, targets, static_cast<long>(B) * T_);
  embed(s, parameters);
  blocks_forward(s, parameters);
  head_forward(s, parameters);
  // The loss and its logit gradient in one pass, the gradient overwriting the logits.
  cross_entropy(s, loss_scale);
  s.forwarded = true;
  s.has_targets = true;
  backward_pass(s, parameters, loss_scale, true);
}

template <class T>
void CudaGpt<T>::backward(int slot, Parameters& parameters, float loss_scale) {
  STRATA_CHECK(slot >= 0 && slot < slots() && slots_[static_cast<std::size_t>(slot)].forwarded,
               "backward of slot ", slot, " without its forward");
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  if (partition_.has_head) STRATA_CHECK(s.has_targets, "backward needs a forward with targets");
  backward_pass(s, parameters, loss_scale, false);
}

template <class T>
void CudaGpt<T>::backward_pass(Slot& s, Parameters& parameters, float loss_scale, bool fused) {
  // The tied wte takes gradients from the head and from the embedding: one acquisition spans both.
  float* wte_grads = segment_.wte >= 0 ? parameters.acquire_gradients(segment_.wte) : nullptr;
  // A stage before the last starts from the output gradient its caller wrote into dres.
  if (partition_.has_head) {
    head_backward(s, parameters, wte_grads, loss_scale, fused);
    if (!partition_.has_embedding) parameters.release_gradients(segment_.wte);
  }
  for (int l = partition_.layers() - 1; l >= 0; --l) block_backward(s, parameters, l);
  if (partition_.has_embedding) {
    embed_backward(s, parameters, wte_grads);
    parameters.release_gradients(segment_.wte);
  }
  s.forwarded = false;
}

template <class T>
void CudaGpt<T>::head_backward(Slot& s, Parameters& parameters, float* wte_grads, float loss_scale,
                               bool fused) {
  const int C = shape_.d_model, V = shape_.vocab_size;
  const int N = s.batch * s.time, Nr = activation_rows(s.batch, s.time);
  const TensorView& wte = layout_.at("wte");
  const int vocab_begin = static_cast<int>(wte.slice.mid_begin);
  const int Vl = static_cast<int>(wte.slice.mid_count);
  Buffers& b = *buffers_;
  cudaStream_t stream = ctx_.stream();
  if (!fused) {  // dlogits overwrite the logits in place, from the forward's row statistics
    fill(b.dlosses, loss_scale / static_cast<float>(N), N, stream);
    // Rewrites the forward's losses with the same values (the same formula on the same inputs).
    crossentropy_shard_finish_backward(s.losses, s.logits, s.logits, s.targets, b.dlosses,
                                       s.ce_stats, s.ce_stats + N, s.ce_stats + 2 * N, vocab_begin,
                                       V, N, Vl, stream);
  }
  const T* lnf_full = sequence_parallel_ ? s.lnf_full : s.lnf;
  matmul_backward_weight(ctx_, in_segment(wte_grads, segment_.wte, "wte"), nullptr, s.logits,
                         lnf_full, N, C, Vl, scratch_);
  const T* wte_weights = parameters.acquire_weights(segment_.wte, WeightUse::backward);
  matmul_backward_input(ctx_, b.dln, s.logits, in_segment(wte_weights, segment_.wte, "wte"),
                        static_cast<const T*>(nullptr), N, C, Vl);
  parameters.release_weights(segment_.wte);
  const T* dlnf = sum_rows(b.dln, b.dln_local, N);  // (Nr, C)
  STRATA_CUDA_CHECK(
      cudaMemsetAsync(b.dres, 0, static_cast<std::size_t>(Nr) * C * sizeof(T), stream));
  const T* x = stage_residual_output(s);
  const T* lnf = parameters.acquire_weights(segment_.lnf, WeightUse::backward);
  float* lnf_grads = parameters.acquire_gradients(segment_.lnf);
  layernorm_backward(b.dres, in_segment(lnf_grads, segment_.lnf, "lnf.weight"),
                     in_segment(lnf_grads, segment_.lnf, "lnf.bias"), dlnf, x,
                     in_segment(lnf, segment_.lnf, "lnf.weight"), s.lnf_mean, s.lnf_rstd, Nr, C,
                     scratch_, stream);
  parameters.release_weights(segment_.lnf);
  parameters.release_gradients(segment_.lnf);
}

template <class T>
void CudaGpt<T>::block_backward(Slot& s, Parameters& parameters, int l) {
  const int B = s.batch, T_ = s.time, C = shape_.d_model, tp = partition_.tp_size;
  const int N = B * T_, Nr = activation_rows(B, T_), Cl = C / tp, Hl = 4 * C / tp;
  const int segment = block_segment(l);
  // One acquisition of the weights serves the recomputation and the backward pass.
  const T* w = parameters.acquire_weights(segment, WeightUse::backward);
  float* grads = parameters.acquire_gradients(segment);
  auto p = [&](const char* name) { return in_block(w, l, name); };
  auto g = [&](const char* name) { return in_block(grads, l, name); };
  cudaStream_t stream = ctx_.stream();
  Buffers& b = *buffers_;
  const Layer a = layer(s, l, true);
  // Bring back what the forward dropped, by the forward's own code on the same inputs.
  if (recompute_ == Recompute::full)
    block_forward(a, w, l, B, T_);
  else if (recompute_ == Recompute::selective)
    attention_core_forward(a, w, l, B, T_, sequence_parallel_ ? a.ln1_full : a.ln1);
  const T* ln1_full = sequence_parallel_ ? a.ln1_full : a.ln1;
  const T* ln2_full = sequence_parallel_ ? a.ln2_full : a.ln2;
  // A row-parallel layer's bias is replicated: with sequence parallelism each rank adds its rows'
  // share (the trainer sums replicated gradients over the group), otherwise the GEMM's epilogue
  // adds the whole from the same pass.
  auto row_parallel_bias = [&](const char* name) -> float* {
    if (!sequence_parallel_) return g(name);
    bias_backward(g(name), b.dres, Nr, C, scratch_, stream);
    return nullptr;
  };

  // MLP: out = x2 + [sum](h·Wprojᵀ) + b, h = gelu(fch); dres is d(loss)/d(out).
  float* mlp_proj_bias = row_parallel_bias("mlp.proj.bias");
  const T* dz = gather_rows(b.dres, b.dfull, N);  // (N, C)
  matmul_backward_weight(ctx_, g("mlp.proj.weight"), mlp_proj_bias, dz, a.fch_gelu, N, Hl, C,
                         scratch_);
  matmul_backward_input(ctx_, b.dfch, dz, p("mlp.proj.weight"), a.fch, N, Hl,
                        C);  // d/d(fch): GELU' in the epilogue
  matmul_backward_weight(ctx_, g("mlp.fc.weight"), g("mlp.fc.bias"), b.dfch, ln2_full, N, C, Hl,
                         scratch_);
  matmul_backward_input(ctx_, b.dln, b.dfch, p("mlp.fc.weight"), static_cast<const T*>(nullptr), N,
                        C, Hl);
  const T* dln2 = sum_rows(b.dln, b.dln_local, N);  // (Nr, C)
  layernorm_backward(b.dres, g("ln2.weight"), g("ln2.bias"), dln2, a.x2, p("ln2.weight"),
                     a.ln2_mean, a.ln2_rstd, Nr, C, scratch_, stream);
  // Attention: x2 = x + [sum](atty·Wprojᵀ) + b; dres is now d(loss)/d(x2).
  float* attn_proj_bias = row_parallel_bias("attn.proj.bias");
  const T* dy = gather_rows(b.dres, b.dfull, N);
  matmul_backward_weight(ctx_, g("attn.proj.weight"), attn_proj_bias, dy, a.atty, N, Cl, C,
                         scratch_);
  matmul_backward_input(ctx_, b.datty, dy, p("attn.proj.weight"), static_cast<const T*>(nullptr), N,
                        Cl, C);
  attention_backward(b.dqkv, b.datty, a.qkv, a.atty, a.lse, B, T_, Cl, shape_.n_head / tp, scratch_,
                     stream);
  matmul_backward_weight(ctx_, g("attn.qkv.weight"), g("attn.qkv.bias"), b.dqkv, ln1_full, N, C,
                         3 * Cl, scratch_);
  matmul_backward_input(ctx_, b.dln, b.dqkv, p("attn.qkv.weight"), static_cast<const T*>(nullptr),
                        N, C, 3 * Cl);
  const T* dln1 = sum_rows(b.dln, b.dln_local, N);
  layernorm_backward(b.dres, g("ln1.weight"), g("ln1.bias"), dln1, a.x, p("ln1.weight"), a.ln1_mean,
                     a.ln1_rstd, Nr, C, scratch_, stream);
  parameters.release_weights(segment);
  parameters.release_gradients(segment);
}

template <class T>
void CudaGpt<T>::embed_backward(Slot& s, Parameters& parameters, float* wte_grads) {
  const int C = shape_.d_model, N = s.batch * s.time, Nr = activation_rows(s.batch, s.time);
  const TensorView& wte = layout_.at("wte");
  Buffers& b = *buffers_;
  const long row_begin = sequence_parallel_ ? static_cast<long>(partition_.tp_rank) * Nr : 0;
  float* wpe_grads = parameters.acquire_gradients(segment_.wpe);
  position_embedding_backward(in_segment(wpe_grads, segment_.wpe, "wpe"), b.dres, row_begin, Nr,
                              s.time, C, ctx_.stream());
  parameters.release_gradients(segment_.wpe);
  const T* dfull = gather_rows(b.dres, b.dfull, N);  // (N, C)
  embedding_shard_backward(in_segment(wte_grads, segment_.wte, "wte"), dfull, s.tokens,
                           static_cast<int>(wte.slice.mid_begin),
                           static_cast<int>(wte.slice.mid_count), N, C, scratch_, ctx_.stream());
}

template <class T>
T* CudaGpt<T>::stage_input(int slot) {
  STRATA_CHECK(slot >= 0 && slot < slots() && !partition_.has_embedding);
  return slots_[static_cast<std::size_t>(slot)].residual;
}

template <class T>
const T* CudaGpt<T>::stage_output(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots() && !partition_.has_head);
  return stage_residual_output(slots_[static_cast<std::size_t>(slot)]);
}

// The residual stream after the stage's last block: block inputs are strided by the rows of
// max_batch sequences (layer()), whatever the micro-batch holds.
template <class T>
T* CudaGpt<T>::stage_residual_output(const Slot& s) const {
  const Dims d = dims();
  return s.residual + d.L * d.Nr * d.C;
}

template <class T>
T* CudaGpt<T>::stage_output_grad() {
  STRATA_CHECK(!partition_.has_head);
  return buffers_->dres;
}

template <class T>
const T* CudaGpt<T>::stage_input_grad() const {
  STRATA_CHECK(!partition_.has_embedding);
  return buffers_->dres;
}

template <class T>
const float* CudaGpt<T>::losses(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots());
  const Slot& s = slots_[static_cast<std::size_t>(slot)];
  return partition_.has_head && s.has_targets ? s.losses : nullptr;
}

template <class T>
const T* CudaGpt<T>::logits(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots());
  const Slot& s = slots_[static_cast<std::size_t>(slot)];
  return partition_.has_head && s.forwarded && !s.has_targets ? s.logits : nullptr;
}

template <class T>
double CudaGpt<T>::loss_sum(int slot) const {
  const float* device = losses(slot);
  STRATA_CHECK(device != nullptr, "loss_sum before a pass with targets");
  const Slot& s = slots_[static_cast<std::size_t>(slot)];
  std::vector<float> host(static_cast<std::size_t>(s.batch) * s.time);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, host.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, ctx_.stream()));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  double sum = 0;
  for (float x : host) sum += x;
  return sum;
}

template class CudaGpt<float>;
template class CudaGpt<__nv_bfloat16>;
template class CudaGpt<__half>;

}  // namespace strata::cuda

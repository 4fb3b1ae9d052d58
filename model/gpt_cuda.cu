// CudaGpt (model/gpt_cuda.h): its construction, the layout of its storage in one device reservation
// (model/gpt_cuda_storage.cuh), the slots, the accessors and the entry points of the passes; the
// passes themselves are the CPU model's (GptPasses, model/gpt_passes.h), their kernels in CudaOps
// (model/ops/cuda_ops.h).
// Status: ran on an NVIDIA H200 (2026-11-26): every `cuda` test passed (docs/PERFORMANCE.md). The
// split backward's storage (slot weight stashes, the fused backward's one-layer stash) has not run
// on a GPU yet; the MoE blocks' storage, moe_loss and take_moe_totals: compiled, never run on a
// GPU.
#include "model/gpt_cuda.h"

#include <algorithm>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "model/gpt_cuda_storage.cuh"
#include "model/kernels/cuda/attention.h"
#include "model/kernels/cuda/check.h"

namespace strata::cuda {

namespace {

// Kernel scratch, taken by the ops (model/ops/cuda_ops.h): LayerNorm and bias column sums, the
// embedding sort, attention's row sums, the cross-entropy's loss gradient (4 bytes per row); a few
// MiB at GPT-2 sizes; 64 MiB plus 256 bytes per row leaves ample room. The MoE layer takes its
// scratch from the same arena, never while the model holds any: its own most on top.
template <class T>
std::size_t scratch_bytes(const GptShape& shape, const ModelPartition& p, int max_batch) {
  const std::size_t rows = static_cast<std::size_t>(max_batch) * shape.seq_len;
  const std::size_t moe = shape.moe.enabled()
                              ? CudaMoeLayer<T>::scratch_bytes(shape.d_model, p.tp_size, shape.moe,
                                                               static_cast<int>(rows), p.ep_size)
                              : 0;
  return (std::size_t{64} << 20) + 256 * rows + moe;
}

}  // namespace

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
  d.moe.resize(d.L);
  d.moe_layers = 0;
  for (std::size_t l = 0; l < d.L; ++l) {
    d.moe[l] = shape.moe.is_moe_block(p.layer_begin + static_cast<int>(l));
    d.moe_layers += d.moe[l] ? 1 : 0;
  }
  d.moe_bytes = shape.moe.enabled()
                    ? CudaMoeLayer<T>::activation_bytes(shape.d_model, p.tp_size, shape.moe,
                                                        static_cast<int>(d.N), p.ep_size)
                    : 0;
  return d;
}

template <class T>
typename CudaGpt<T>::Dims CudaGpt<T>::dims() const {
  return dims_of(shape_, partition_, max_batch_, slots());
}

// Lays out every slot and the shared buffers (over `c`'s reservation, or only measuring it);
// returns the bytes of activations (the slots, their weight stashes and the recompute workspace),
// which come first.
template <class T>
std::size_t CudaGpt<T>::carve(std::vector<Slot>& slots, Buffers& b, BufferCarver& c, const Dims& d,
                              Recompute recompute, bool split_backward) {
  const bool keep_rest = recompute != Recompute::full;
  const bool keep_attention = recompute == Recompute::none;
  for (Slot& s : slots) {
    s.residual = c.take<T>((d.L + 1) * d.Nr * d.C);
    s.kept.carve(c, keep_rest ? d.L : 0, keep_attention ? d.L : 0, keep_rest ? d.mlp_layers() : 0,
                 d);
    s.lnf = c.take<T>(d.head ? d.Nr * d.C : 0);
    s.lnf_full = c.take<T>(d.head && d.sp ? d.N * d.C : 0);
    s.lnf_mean = c.take<float>(d.head ? d.Nr : 0);
    s.lnf_rstd = c.take<float>(d.head ? d.Nr : 0);
    s.logits = c.take<T>(d.head ? d.N * d.Vl : 0);
    if (split_backward) s.stash.carve(c, d, !keep_attention, !keep_rest);
    s.moe_memory = c.take<char>(d.moe_layers * d.moe_bytes);
  }
  b.work.carve(c, keep_rest ? 0 : 1, keep_attention ? 0 : 1,
               keep_rest || d.mlp_layers() == 0 ? 0 : 1, d);
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
  b.dln = c.take<T>(d.sp ? d.N * d.C : 0);
  b.datty = c.take<T>(d.N * d.Cl);
  // The fused backward reads dlnf before any block's input half writes layer 0, and dembed after
  // the last block's weight half has read it: both share layer 0's arrays.
  b.stash.layers.resize(1);
  carve_stash_layer(b.stash.layers[0], c, d, false, false, d.mlp_layers() > 0);
  b.stash.dlnf = d.head ? b.stash.layers[0].dln1 : nullptr;
  b.stash.dembed = d.embedding ? b.stash.layers[0].dz : nullptr;
  return activations;
}

namespace {

ModelPartition checked_partition(const GptShape& shape, const ModelPartition& p, int max_batch,
                                 int slots) {
  STRATA_CHECK(shape.n_layer > 0 && shape.d_model % shape.n_head == 0 && slots >= 1 &&
               max_batch >= 1);
  STRATA_CHECK(p.chunks() == 1, "a model computes one chunk of layers (partition.chunk)");
  STRATA_CHECK(shape.n_head % p.tp_size == 0 && shape.padded_vocab() % p.tp_size == 0,
               "tensor-parallel degree ", p.tp_size, " does not divide the heads and vocabulary");
  STRATA_CHECK(!p.sequence_parallel || (max_batch * shape.seq_len) % p.tp_size == 0,
               "sequence parallelism needs B·T divisible by tp");
  if (!attention_head_size_supported(shape.head_size()))
    fail("device cuda: head size ", shape.head_size(),
         " (d_model / n_head) has no attention kernel (a multiple of 16 up to 128)");
  return p;
}

// The staging of the tensor-parallel collectives through the host, when no device group carries
// them: `elements` per call at most.
std::unique_ptr<StagedCollectives> staged_group(const ModelPartition& p, Collectives* tp,
                                                DeviceCollectives* device_tp,
                                                std::size_t elements) {
  if (device_tp != nullptr || p.tp_size == 1) return nullptr;
  STRATA_CHECK(tp != nullptr, "a tensor-parallel partition needs its group");
  return std::make_unique<StagedCollectives>(*tp, elements);
}

// The group the model's collectives run over: null with tp 1 (a group of one carries nothing, so
// the model skips its collectives altogether).
DeviceCollectives* tensor_parallel_group(const ModelPartition& p, DeviceCollectives* device_tp,
                                         StagedCollectives* staged) {
  DeviceCollectives* group = device_tp != nullptr ? device_tp : staged;
  STRATA_CHECK(p.tp_size == 1 ||
                   (group != nullptr && group->size() == p.tp_size && group->rank() == p.tp_rank),
               "the tensor-parallel group does not match the partition");
  return p.tp_size == 1 ? nullptr : group;
}

}  // namespace

template <class T>
CudaGpt<T>::CudaGpt(DeviceContext& ctx, const GptShape& shape, int max_batch, Recompute recompute)
    : CudaGpt(ctx, shape, ModelPartition::whole(shape), nullptr, max_batch, 1, recompute) {}

template <class T>
std::size_t CudaGpt<T>::reservation_bytes(const Dims& d, Recompute recompute, bool split_backward) {
  std::vector<Slot> slots(d.slots);
  Buffers unused;
  BufferCarver counter;
  carve(slots, unused, counter, d, recompute, split_backward);
  return counter.used();
}

template <class T>
CudaGpt<T>::CudaGpt(DeviceContext& ctx, const GptShape& shape, const ModelPartition& partition,
                    Collectives* tp, int max_batch, int slots, Recompute recompute,
                    DeviceCollectives* device_tp, bool split_backward, Collectives* ep)
    : Passes(shape, checked_partition(shape, partition, max_batch, slots), recompute),
      ctx_(ctx),
      max_batch_(max_batch),
      split_backward_(split_backward),
      activations_(reservation_bytes(dims_of(shape, partition, max_batch, slots), recompute,
                                     split_backward)),
      scratch_(scratch_bytes<T>(shape, partition, max_batch)),
      staged_tp_(staged_group(partition, tp, device_tp,
                              static_cast<std::size_t>(max_batch) * shape.seq_len * shape.d_model)),
      tp_(tensor_parallel_group(partition, device_tp, staged_tp_.get())),
      ops_(ctx_, scratch_, tp_, sequence_parallel_),
      slots_(static_cast<std::size_t>(slots)),
      buffers_(std::make_unique<Buffers>()) {
  const Dims d = dims();
  this->find_block_offsets();
  BufferCarver carver(static_cast<char*>(activations_.allocate(activations_.capacity())));
  activation_bytes_ = carve(slots_, *buffers_, carver, d, recompute, split_backward);
  if (shape.moe.enabled()) {
    STRATA_CHECK(ep == nullptr ? partition.ep_size == 1
                               : ep->size() == partition.ep_size && ep->rank() == partition.ep_rank,
                 "the expert-parallel group does not match the partition");
    // Stateless but for where it reaches: the context, the kernels' scratch, the tensor-parallel
    // group (its gates' gradient all-reduce) and the expert-parallel group (the rows' exchange).
    moe_ = std::make_unique<CudaMoeLayer<T>>(ctx_, scratch_, shape.d_model, shape.moe, tp_, ep);
    STRATA_CHECK(moe_->activation_bytes(static_cast<int>(d.N)) == d.moe_bytes);
    lay_out_moe_activations();
  }
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
void CudaGpt<T>::lay_out_moe_activations() {
  const Dims d = dims();
  for (Slot& s : slots_) {
    s.moe.assign(d.L, CudaMoeActivations<T>{});
    char* next = s.moe_memory;
    for (std::size_t l = 0; l < d.L; ++l) {
      if (!is_moe(static_cast<int>(l))) continue;
      s.moe[l] = moe_->activations(next, static_cast<int>(d.N));
      next += d.moe_bytes;
    }
  }
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
SlotLimits CudaGpt<T>::slot_limits() const {
  return {slots(), max_batch_, shape_.seq_len, sequence_parallel_ ? partition_.tp_size : 1};
}

template <class T>
typename CudaGpt<T>::Slot& CudaGpt<T>::slot_for(int slot, int B, int T_) {
  check_slot_batch(slot_limits(), slot, B, T_);
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  check_slot_free(s, slot);
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
GptBlockBuffers<T> CudaGpt<T>::buffers() const {
  const Buffers& b = *buffers_;
  return {b.partial, b.reduced, b.dres, b.dln, b.datty};
}

template <class T>
GptStashLayer<T> CudaGpt<T>::stash_layer(const Slot&, GptWeightStash<T>& w, int, int at) const {
  return w.layers[static_cast<std::size_t>(at)];
}

template <class T>
GptWeightStash<T>& CudaGpt<T>::fused_stash() {
  return buffers_->stash;
}

template <class T>
typename CudaGpt<T>::Layer CudaGpt<T>::layer(Slot& s, int l, bool recomputing) const {
  const Buffers& b = *buffers_;
  const Dims d = dims();
  const bool keep_rest = this->recompute_ != Recompute::full;
  const bool keep_attention = this->recompute_ == Recompute::none;
  const GptLayerArrays<T>& rest = keep_rest ? s.kept : b.work;
  const GptLayerArrays<T>& attn = keep_attention ? s.kept : b.work;
  const std::size_t r = keep_rest ? static_cast<std::size_t>(l) : 0;
  const std::size_t a = keep_attention ? static_cast<std::size_t>(l) : 0;
  // The dense MLP's arrays hold only the layers without experts: this one's among them.
  std::size_t m = 0;
  for (std::size_t earlier = 0; keep_rest && earlier < r; ++earlier) m += d.moe[earlier] ? 0 : 1;
  const bool moe = d.moe[static_cast<std::size_t>(l)];
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
  x.fch = moe ? nullptr : rest.fch + m * d.N * d.Hl;
  x.fch_gelu = moe ? nullptr : rest.fch_gelu + m * d.N * d.Hl;
  x.qkv = attn.qkv + a * d.N * 3 * d.Cl;
  x.atty = attn.atty + a * d.N * d.Cl;
  x.lse = attn.lse + a * d.N * d.NHl;
  x.moe = moe ? &s.moe[static_cast<std::size_t>(l)] : nullptr;
  return x;
}

template <class T>
T* CudaGpt<T>::stage_input(int slot) {
  STRATA_CHECK(slot >= 0 && slot < slots() && !partition_.has_embedding);
  return slots_[static_cast<std::size_t>(slot)].residual;
}

template <class T>
const T* CudaGpt<T>::stage_output(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots() && !partition_.has_head);
  return stage_output(slots_[static_cast<std::size_t>(slot)]);
}

// The residual stream after the stage's last block: block inputs are strided by the rows of
// max_batch sequences (layer()), whatever the micro-batch holds.
template <class T>
T* CudaGpt<T>::stage_output(const Slot& s) const {
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

template <class T>
float CudaGpt<T>::moe_loss(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots());
  return this->moe_loss_of(slots_[static_cast<std::size_t>(slot)]);  // unused slots have none
}

// The passes (GptPasses, model/gpt_passes.h) only queue kernels: each release comes once the
// kernels that read a segment's weights (or add to its gradients) are queued on the compute
// stream, not once they have run. A ParameterAccess that frees, reuses or reduces a segment's
// memory on release must order that after them (work on the compute stream, or wait for an event
// recorded there); FlatParameters does nothing on release.
template <class T>
void CudaGpt<T>::forward(int slot, Parameters& parameters, const std::int32_t* tokens,
                         const std::int32_t* targets, int B, int T_) {
  Slot& s = slot_for(slot, B, T_);
  const bool has_head = partition_.has_head;
  if (partition_.has_embedding) STRATA_CHECK(tokens != nullptr, "the first stage needs tokens");
  upload_tokens(s, partition_.has_embedding ? tokens : nullptr, has_head ? targets : nullptr,
                static_cast<long>(B) * T_);
  s.has_targets = has_head && targets != nullptr;
  this->forward_pass(s, parameters);  // with targets: losses and row statistics; logits stay
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
  this->forward_backward_pass(s, parameters, loss_scale);
}

template <class T>
typename CudaGpt<T>::Slot& CudaGpt<T>::backward_slot(int slot) {
  const bool held = slot >= 0 && slot < slots();
  check_slot_backward(slot_limits(), held ? slots_[static_cast<std::size_t>(slot)] : SlotState{},
                      slot, partition_.has_head);
  return slots_[static_cast<std::size_t>(slot)];
}

// A stage before the last starts from the output gradient its caller wrote into dres
// (stage_output_grad).
template <class T>
void CudaGpt<T>::backward(int slot, Parameters& parameters, float loss_scale) {
  this->backward_pass(backward_slot(slot), parameters, loss_scale, false);
}

template <class T>
void CudaGpt<T>::backward_input(int slot, Parameters& parameters, float loss_scale) {
  STRATA_CHECK(split_backward_, "backward_input needs a model built with split_backward");
  this->backward_input_pass(backward_slot(slot), parameters, loss_scale);
}

template <class T>
void CudaGpt<T>::backward_weight(int slot, Parameters& parameters) {
  check_slot_weight_backward(
      slot_limits(),
      slot >= 0 && slot < slots() ? slots_[static_cast<std::size_t>(slot)] : SlotState{}, slot);
  this->backward_weight_pass(slots_[static_cast<std::size_t>(slot)], parameters);
}

template class CudaGpt<float>;
template class CudaGpt<__nv_bfloat16>;
template class CudaGpt<__half>;

}  // namespace strata::cuda

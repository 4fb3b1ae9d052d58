// CudaGpt (model/gpt_cuda.h): its construction, the upload of tokens, the accessors and the entry
// points of the passes; its storage is the passes' GptStorage (model/gpt_storage.h), the
// passes themselves are the CPU model's (GptPasses, model/gpt_passes.h), their kernels in CudaOps
// (model/ops/cuda_ops.h).
#include "model/gpt_cuda.h"

#include <algorithm>
#include <string>
#include <vector>

#include "model/core/error.h"
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
  const std::size_t rows =
      static_cast<std::size_t>(max_batch) * p.context.local_length(shape.seq_len);
  const std::size_t moe = shape.moe.enabled() ? CudaMoeLayer<T>::scratch_bytes(
                                                    shape.expert_shape(), p.tp_size, shape.moe,
                                                    static_cast<int>(rows), p.ep_size)
                                              : 0;
  return (std::size_t{64} << 20) + 256 * rows + moe;
}

// An FP8 GEMM's codes in the same arena, two operands at a time (model/ops/cuda_ops_fp8.cu): at
// most rows·(in + out) + in·out bytes over the block's GEMMs (each width its logical one, at least
// this rank's), and their amaxes, scales and inverses: a float each per operand, or under rowwise
// one per row of the operand as the GEMM takes it (at most max(rows, in, out)), each array
// aligned to the arena's 256 bytes.
std::size_t fp8_scratch_bytes(const Fp8Settings& fp8, const GptShape& shape,
                              const ModelPartition& p, int max_batch) {
  if (!fp8.enabled()) return 0;
  const std::size_t rows =
      static_cast<std::size_t>(max_batch) * p.context.local_length(shape.seq_len);
  const std::size_t in = static_cast<std::size_t>(std::max(shape.d_model, shape.ffn_width()));
  const std::size_t out =
      static_cast<std::size_t>(std::max({shape.d_model, shape.qkv_width(), shape.fc_width()}));
  const std::size_t vectors =
      fp8.scaling == Fp8Scaling::rowwise ? 2 * 3 * sizeof(float) * std::max({rows, in, out}) : 0;
  return rows * (in + out) + in * out + vectors + 4096;
}

}  // namespace

namespace {

ModelPartition checked_partition(const GptShape& shape, const ModelPartition& p, int max_batch,
                                 int slots) {
  STRATA_CHECK(shape.n_layer > 0 && shape.d_model % shape.n_head == 0 && slots >= 1 &&
               max_batch >= 1);
  STRATA_CHECK(p.chunks() == 1, "a model computes one chunk of layers (partition.chunk)");
  STRATA_CHECK(shape.n_head % p.tp_size == 0 && shape.padded_vocab() % p.tp_size == 0,
               "tensor-parallel degree ", p.tp_size, " does not divide the heads and vocabulary");
  STRATA_CHECK(
      !p.sequence_parallel || (max_batch * p.context.local_length(shape.seq_len)) % p.tp_size == 0,
      "sequence parallelism needs B·T divisible by tp");
  STRATA_CHECK(!p.context.split() || !shape.moe.enabled(),
               "context parallelism with experts: their capacity groups are whole sequences");
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

// The elements the context-parallel group's staging holds: a K/V block (B·T_local·2·KVl·hs) for
// the ring's shifts, cp of them for all_gather's gathers and reduce-scatters.
std::size_t context_staging_elements(const GptShape& shape, const ModelPartition& p,
                                     ContextComm comm, int max_batch) {
  const std::size_t block = static_cast<std::size_t>(max_batch) *
                            p.context.local_length(shape.seq_len) * 2 *
                            (shape.kv_head_count() / p.tp_size) * shape.head_size();
  return comm == ContextComm::ring ? block : static_cast<std::size_t>(p.context.cp) * block;
}

// The context-parallel group's staging over `cp` (host collectives), unless `device_cp` carries
// the K/V blocks.
std::unique_ptr<StagedCollectives> staged_context_group(const GptShape& shape,
                                                        const ModelPartition& p,
                                                        const CudaContextGroup& context,
                                                        int max_batch) {
  if (context.device_cp != nullptr || !p.context.split()) return nullptr;
  STRATA_CHECK(context.cp != nullptr, "a context-parallel partition needs its group");
  return std::make_unique<StagedCollectives>(
      *context.cp, context_staging_elements(shape, p, context.comm, max_batch));
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
CudaGpt<T>::CudaGpt(DeviceContext& ctx, const GptShape& shape, const ModelPartition& partition,
                    Collectives* tp, int max_batch, int slots, Recompute recompute,
                    DeviceCollectives* device_tp, bool split_backward, Collectives* ep,
                    const CudaContextGroup& context, const Fp8Settings& fp8)
    : Passes(shape, checked_partition(shape, partition, max_batch, slots),
             {max_batch, slots, recompute, split_backward, false}),
      ctx_(ctx),
      max_batch_(max_batch),
      context_comm_(context.comm),
      scratch_(scratch_bytes<T>(shape, partition, max_batch) +
               fp8_scratch_bytes(fp8, shape, partition, max_batch)),
      staged_tp_(staged_group(partition, tp, device_tp,
                              static_cast<std::size_t>(max_batch) *
                                  partition.context.local_length(shape.seq_len) * shape.d_model)),
      tp_(tensor_parallel_group(partition, device_tp, staged_tp_.get())),
      staged_cp_(staged_context_group(shape, partition, context, max_batch)),
      ops_(ctx_, scratch_, tp_, sequence_parallel_) {
  static_assert(kStorageAlignment == DeviceArena::kDefaultAlignment);
  if (partition.context.split())
    this->attend_across(context.device_cp != nullptr ? *context.device_cp : *staged_cp_,
                        context.comm);
  this->find_block_offsets();
  this->multiply_in_fp8(fp8);
  if (Fp8State* state = this->fp8_state()) {
    DeviceCollectives* cp = nullptr;
    if (partition.context.split())
      cp = context.device_cp != nullptr ? context.device_cp : staged_cp_.get();
    // The delayed recipe's norms and GELU cast what they write for the GEMM that reads it
    // (CudaOps::fused_cast): at most a micro-batch's rows by the model width or this rank's fc
    // columns.
    const std::size_t fused_codes =
        fp8.scaling == Fp8Scaling::delayed
            ? static_cast<std::size_t>(max_batch) * partition.context.local_length(shape.seq_len) *
                  static_cast<std::size_t>(
                      std::max(shape.d_model, shape.ffn_width() / partition.tp_size))
            : 0;
    ops_.use_fp8(cp, state->sites(), fused_codes);
  }
  if (shape.moe.enabled()) {
    STRATA_CHECK(ep == nullptr ? partition.ep_size == 1
                               : ep->size() == partition.ep_size && ep->rank() == partition.ep_rank,
                 "the expert-parallel group does not match the partition");
    // Stateless but for where it reaches: the context, the kernels' scratch, the tensor-parallel
    // group (its gates' gradient all-reduce) and the expert-parallel group (the rows' exchange).
    moe_ =
        std::make_unique<CudaMoeLayer<T>>(ctx_, scratch_, shape.expert_shape(), shape.moe, tp_, ep);
    STRATA_CHECK(moe_->activation_bytes(static_cast<int>(storage_.dims().N)) ==
                 storage_.dims().moe_bytes);
    storage_.lay_out_moe(*moe_);
  }
  staging_ = PinnedBuffer<std::int32_t>(2 * storage_.dims().N);
  // Last: the event is the one resource the destructor frees by hand, and the destructor does not
  // run when a constructor throws.
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&staging_free_, cudaEventDisableTiming));
}

template <class T>
void CudaGpt<T>::begin_fp8_step() {
  Fp8State* state = this->fp8_state();
  if (state == nullptr || state->sites() == 0) return;
  state->begin_step();
  STRATA_CUDA_CHECK(
      cudaMemsetAsync(ops_.fp8_step_amaxes(), 0, state->sites() * sizeof(float), ctx_.stream()));
}

template <class T>
void CudaGpt<T>::hand_over_fp8_step() {
  Fp8State* state = this->fp8_state();
  if (state == nullptr || state->sites() == 0) return;
  std::vector<float> amaxes(state->sites());
  STRATA_CUDA_CHECK(cudaMemcpyAsync(amaxes.data(), ops_.fp8_step_amaxes(),
                                    amaxes.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                    ctx_.stream()));
  ctx_.synchronize();
  state->record_sites(amaxes);
}

template <class T>
CudaGpt<T>::~CudaGpt() {
  if (staging_free_ != nullptr) STRATA_CUDA_REPORT(cudaEventDestroy(staging_free_));
}

template <class T>
std::size_t CudaGpt<T>::device_bytes() const {
  const std::size_t staging = staged_tp_ ? std::size_t{sizeof(float)} * max_batch_ *
                                               static_cast<std::size_t>(this->sequence_rows()) *
                                               static_cast<std::size_t>(shape_.d_model)
                                         : 0;
  // The context group's staging converts its blocks in an fp32 device buffer too.
  const std::size_t context_staging =
      staged_cp_
          ? sizeof(float) * context_staging_elements(shape_, partition_, context_comm_, max_batch_)
          : 0;
  return storage_.reserved_bytes() + scratch_.capacity() + staging + context_staging +
         (this->context_ ? this->context_->memory_bytes() : 0) + ops_.fp8_bytes();
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
  const long max_rows = static_cast<long>(storage_.dims().N);  // max_batch sequences' rows here
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
T* CudaGpt<T>::stage_input(int slot) {
  STRATA_CHECK(slot >= 0 && slot < this->slots() && !partition_.has_embedding);
  return storage_.slot(slot).residual;
}

template <class T>
const T* CudaGpt<T>::stage_output(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < this->slots() && !partition_.has_head);
  return storage_.stage_output(storage_.slot(slot));
}

template <class T>
T* CudaGpt<T>::stage_output_grad() {
  STRATA_CHECK(!partition_.has_head);
  return storage_.buffers().dres;
}

template <class T>
const T* CudaGpt<T>::stage_input_grad() const {
  STRATA_CHECK(!partition_.has_embedding);
  return storage_.buffers().dres;
}

template <class T>
const float* CudaGpt<T>::losses(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < this->slots());
  const Slot& s = storage_.slot(slot);
  return partition_.has_head && s.has_targets ? s.losses : nullptr;
}

template <class T>
const T* CudaGpt<T>::logits(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < this->slots());
  const Slot& s = storage_.slot(slot);
  return partition_.has_head && s.forwarded && !s.has_targets ? s.logits : nullptr;
}

template <class T>
double CudaGpt<T>::loss_sum(int slot) const {
  const float* device = losses(slot);
  STRATA_CHECK(device != nullptr, "loss_sum before a pass with targets");
  const Slot& s = storage_.slot(slot);
  std::vector<float> host(static_cast<std::size_t>(s.batch) * s.time);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, host.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, ctx_.stream()));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  double sum = 0;
  for (float x : host) sum += x;
  return sum;
}

// The passes (GptPasses, model/gpt_passes.h) only queue kernels: each release comes once the
// kernels that read a segment's weights (or add to its gradients) are queued on the compute
// stream, not once they have run. A ParameterAccess that frees, reuses or reduces a segment's
// memory on release must order that after them (work on the compute stream, or wait for an event
// recorded there); FlatParameters does nothing on release.
template <class T>
void CudaGpt<T>::forward(int slot, Parameters& parameters, const std::int32_t* tokens,
                         const std::int32_t* targets, int B, int T_) {
  Slot& s = this->slot_for(slot, B, T_);
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
  Slot& s = this->slot_for(0, B, T_);
  upload_tokens(s, tokens, targets, static_cast<long>(B) * T_);
  this->forward_backward_pass(s, parameters, loss_scale);
}

template class CudaGpt<float>;
template class CudaGpt<__nv_bfloat16>;
template class CudaGpt<__half>;

}  // namespace strata::cuda

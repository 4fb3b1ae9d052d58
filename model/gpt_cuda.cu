// Status: compiled for sm_90a, never run on a GPU (untested).
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

// One block's activations: into the kept per-layer arrays or, for what recomputation drops, the
// one-layer workspace. N = B·T rows, C channels.
template <class T>
struct CudaGpt<T>::Layer {
  const T* x;                  // block input (N, C): the residual stream, always kept
  T* out;                      // block output (N, C)
  T *ln1, *x2, *ln2;           // (N, C)
  float *ln1_mean, *ln1_rstd;  // (N)
  float *ln2_mean, *ln2_rstd;  // (N)
  T *fch, *fch_gelu;           // (N, 4C) pre-activation and GELU
  T *qkv, *atty;               // (N, 3C), (N, C)
  float* lse;                  // (B, NH, T) logsumexp per query row
};

// Per-layer arrays (a count of layers of each: 0 where recomputation drops them).
template <class T>
struct GptLayerArrays {
  T *ln1 = nullptr, *x2 = nullptr, *ln2 = nullptr, *fch = nullptr, *fch_gelu = nullptr;
  float *ln1_mean = nullptr, *ln1_rstd = nullptr, *ln2_mean = nullptr, *ln2_rstd = nullptr;
  T *qkv = nullptr, *atty = nullptr;
  float* lse = nullptr;

  // `rest_layers` layers of what `full` drops, `attention_layers` of what `selective` drops.
  void carve(BufferCarver& c, std::size_t rest_layers, std::size_t attention_layers, std::size_t N,
             std::size_t C, std::size_t NH) {
    ln1 = c.take<T>(rest_layers * N * C);
    x2 = c.take<T>(rest_layers * N * C);
    ln2 = c.take<T>(rest_layers * N * C);
    ln1_mean = c.take<float>(rest_layers * N);
    ln1_rstd = c.take<float>(rest_layers * N);
    ln2_mean = c.take<float>(rest_layers * N);
    ln2_rstd = c.take<float>(rest_layers * N);
    fch = c.take<T>(rest_layers * N * 4 * C);
    fch_gelu = c.take<T>(rest_layers * N * 4 * C);
    qkv = c.take<T>(attention_layers * N * 3 * C);
    atty = c.take<T>(attention_layers * N * C);
    lse = c.take<float>(attention_layers * N * NH);  // (B, NH, T)
  }
};

template <class T>
struct CudaGpt<T>::Buffers {
  std::int32_t *tokens = nullptr, *targets = nullptr;  // (N) device copies
  T* residual = nullptr;                               // (L+1, N, C) block inputs, model output
  GptLayerArrays<T> kept;                              // what recomputation keeps, all layers
  GptLayerArrays<T> work;                              // one layer of what it drops
  T* recomputed_output = nullptr;                      // (N, C) full recompute's block output
  T* lnf = nullptr;                                    // (N, C)
  float *lnf_mean = nullptr, *lnf_rstd = nullptr;      // (N)
  T* logits = nullptr;                                 // (N, Vp), then their gradient
  float *losses = nullptr, *dlosses = nullptr;         // (N)
  // Not activations: the forward's projection output and the backward's gradients.
  T* proj = nullptr;   // (N, C) output of a row of projections before the residual add
  T* dres = nullptr;   // (N, C) running gradient of the residual stream
  T* dln = nullptr;    // (N, C) gradient of a LayerNorm output
  T* datty = nullptr;  // (N, C)
  T* dqkv = nullptr;   // (N, 3C)
  T* dfch = nullptr;   // (N, 4C)
};

// Lays out every buffer of the model for max_batch sequences (over `c`'s reservation, or only
// measuring it); returns the bytes of activations, which come first.
template <class T>
std::size_t CudaGpt<T>::carve(Buffers& b, BufferCarver& c, const GptShape& shape, int max_batch,
                              Recompute recompute) {
  const std::size_t L = shape.n_layer, C = shape.d_model, NH = shape.n_head;
  const std::size_t N = static_cast<std::size_t>(max_batch) * shape.seq_len;
  const std::size_t Vp = shape.padded_vocab();
  const bool keep_rest = recompute != Recompute::full;
  const bool keep_attention = recompute == Recompute::none;
  b.residual = c.take<T>((L + 1) * N * C);
  b.kept.carve(c, keep_rest ? L : 0, keep_attention ? L : 0, N, C, NH);
  b.work.carve(c, keep_rest ? 0 : 1, keep_attention ? 0 : 1, N, C, NH);
  b.recomputed_output = c.take<T>(keep_rest ? 0 : N * C);
  b.lnf = c.take<T>(N * C);
  b.lnf_mean = c.take<float>(N);
  b.lnf_rstd = c.take<float>(N);
  b.logits = c.take<T>(N * Vp);
  const std::size_t activations = c.used();
  b.tokens = c.take<std::int32_t>(N);
  b.targets = c.take<std::int32_t>(N);
  b.losses = c.take<float>(N);
  b.dlosses = c.take<float>(N);
  b.proj = c.take<T>(N * C);
  b.dres = c.take<T>(N * C);
  b.dln = c.take<T>(N * C);
  b.datty = c.take<T>(N * C);
  b.dqkv = c.take<T>(N * 3 * C);
  b.dfch = c.take<T>(N * 4 * C);
  return activations;
}

template <class T>
std::size_t CudaGpt<T>::reservation_bytes(const GptShape& shape, int max_batch,
                                          Recompute recompute) {
  STRATA_CHECK(max_batch > 0 && shape.n_layer > 0 && shape.d_model % shape.n_head == 0);
  if (!attention_head_size_supported(shape.head_size()))
    fail("device cuda: head size ", shape.head_size(),
         " (d_model / n_head) has no attention kernel (16, 32, 64 or 128)");
  Buffers sizes;
  BufferCarver counter;
  carve(sizes, counter, shape, max_batch, recompute);
  return counter.used();
}

template <class T>
CudaGpt<T>::CudaGpt(DeviceContext& ctx, const GptShape& shape, int max_batch, Recompute recompute)
    : ctx_(ctx),
      shape_(shape),
      layout_(ParameterLayout::for_gpt(shape)),
      max_batch_(max_batch),
      recompute_(recompute),
      activations_(reservation_bytes(shape, max_batch, recompute)),
      scratch_(scratch_bytes(static_cast<std::size_t>(max_batch) * shape.seq_len)),
      buffers_(std::make_unique<Buffers>()) {
  BufferCarver carver(static_cast<char*>(activations_.allocate(activations_.capacity())));
  activation_bytes_ = carve(*buffers_, carver, shape, max_batch, recompute);
  // One block's share: its input (the residual stream) and what recomputation keeps of it.
  const std::size_t N = static_cast<std::size_t>(max_batch) * shape.seq_len;
  const std::size_t C = shape.d_model, NH = shape.n_head;
  std::size_t per_layer = N * C * sizeof(T);  // the block input
  if (recompute != Recompute::full)
    per_layer += N * C * 3 * sizeof(T) + N * 8 * C * sizeof(T) + 4 * N * sizeof(float);
  if (recompute == Recompute::none) per_layer += N * 4 * C * sizeof(T) + N * NH * sizeof(float);
  layer_bytes_ = per_layer;
  // Last: a throw above leaves nothing here for the destructor, which does not run then.
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&staging_free_, cudaEventDisableTiming));
  const cudaError_t pinned =
      cudaMallocHost(reinterpret_cast<void**>(&staging_), 2 * N * sizeof(std::int32_t));
  if (pinned != cudaSuccess) {
    STRATA_CUDA_REPORT(cudaEventDestroy(staging_free_));
    throw_cuda_error(pinned, "cudaMallocHost(staging)", __FILE__, __LINE__);
  }
}

template <class T>
CudaGpt<T>::~CudaGpt() {
  if (staging_free_ != nullptr) STRATA_CUDA_REPORT(cudaEventDestroy(staging_free_));
  if (staging_ != nullptr) STRATA_CUDA_REPORT(cudaFreeHost(staging_));
}

template <class T>
void CudaGpt<T>::upload_tokens(const std::int32_t* tokens, const std::int32_t* targets, long N) {
  for (long i = 0; i < N; ++i)
    STRATA_CHECK(tokens[i] >= 0 && tokens[i] < shape_.vocab_size, "token id out of range");
  if (targets != nullptr)
    for (long i = 0; i < N; ++i)
      STRATA_CHECK(targets[i] >= 0 && targets[i] < shape_.vocab_size, "target id out of range");
  // The previous copies out of the staging buffer must be done before it is overwritten.
  STRATA_CUDA_CHECK(cudaEventSynchronize(staging_free_));
  std::copy_n(tokens, N, staging_);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(buffers_->tokens, staging_, N * sizeof(std::int32_t),
                                    cudaMemcpyHostToDevice, ctx_.stream()));
  if (targets != nullptr) {
    const long max_rows = static_cast<long>(max_batch_) * shape_.seq_len;
    std::copy_n(targets, N, staging_ + max_rows);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(buffers_->targets, staging_ + max_rows,
                                      N * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                                      ctx_.stream()));
  }
  STRATA_CUDA_CHECK(cudaEventRecord(staging_free_, ctx_.stream()));
}

template <class T>
typename CudaGpt<T>::Layer CudaGpt<T>::layer(int l, bool recomputing) const {
  const Buffers& b = *buffers_;
  const long N = static_cast<long>(max_batch_) * shape_.seq_len, C = shape_.d_model;
  const long NH = shape_.n_head;
  const bool keep_rest = recompute_ != Recompute::full;
  const bool keep_attention = recompute_ == Recompute::none;
  const GptLayerArrays<T>& rest = keep_rest ? b.kept : b.work;
  const GptLayerArrays<T>& attn = keep_attention ? b.kept : b.work;
  const long r = keep_rest ? l : 0, a = keep_attention ? l : 0;
  Layer x{};
  x.x = b.residual + l * N * C;
  x.out = recomputing ? b.recomputed_output : b.residual + (l + 1) * N * C;
  x.ln1 = rest.ln1 + r * N * C;
  x.x2 = rest.x2 + r * N * C;
  x.ln2 = rest.ln2 + r * N * C;
  x.ln1_mean = rest.ln1_mean + r * N;
  x.ln1_rstd = rest.ln1_rstd + r * N;
  x.ln2_mean = rest.ln2_mean + r * N;
  x.ln2_rstd = rest.ln2_rstd + r * N;
  x.fch = rest.fch + r * N * 4 * C;
  x.fch_gelu = rest.fch_gelu + r * N * 4 * C;
  x.qkv = attn.qkv + a * N * 3 * C;
  x.atty = attn.atty + a * N * C;
  x.lse = attn.lse + a * N * NH;
  return x;
}

// Parameter views, by name, into a flat buffer (weights in T or gradients in fp32).
template <class P>
static P* param(P* base, const ParameterLayout& layout, const std::string& name) {
  return base + layout.at(name).offset;
}
static std::string block_name(int l, const char* tensor) {
  return "h." + std::to_string(l) + "." + tensor;
}

template <class T>
void CudaGpt<T>::embed(const T* w, int B, int T_) {
  const int C = shape_.d_model, N = B * T_;
  embedding_shard_forward(buffers_->residual, buffers_->tokens, param(w, layout_, "wte"), 0,
                          shape_.padded_vocab(), N, C, ctx_.stream());  // (N, C)
  position_embedding_forward(buffers_->residual, param(w, layout_, "wpe"), 0, N, T_, C,
                             ctx_.stream());
}

// ln1 (N, C) → qkv (N, 3C) → attention output (N, C) and logsumexp: what selective
// recomputation reruns, one function for both.
template <class T>
void CudaGpt<T>::attention_core_forward(const Layer& a, const T* w, int l, int B, int T_) {
  const int C = shape_.d_model, N = B * T_;
  matmul_forward(ctx_, a.qkv, static_cast<T*>(nullptr), a.ln1,
                 param(w, layout_, block_name(l, "attn.qkv.weight")),
                 param(w, layout_, block_name(l, "attn.qkv.bias")), N, C, 3 * C);
  attention_forward(a.atty, a.lse, a.qkv, B, T_, C, shape_.n_head, ctx_.stream());
}

template <class T>
void CudaGpt<T>::block_forward(const Layer& a, const T* w, int l, int B, int T_) {
  const int C = shape_.d_model, N = B * T_;
  auto p = [&](const char* name) { return param(w, layout_, block_name(l, name)); };
  cudaStream_t stream = ctx_.stream();
  T* proj = buffers_->proj;
  // Attention: x2 = x + proj(attn(qkv(ln1(x)))), then ln2 = LN(x2) in the same kernel.
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.x, p("ln1.weight"), p("ln1.bias"), N, C,
                    stream);
  attention_core_forward(a, w, l, B, T_);
  matmul_forward(ctx_, proj, static_cast<T*>(nullptr), a.atty, p("attn.proj.weight"),
                 static_cast<const T*>(nullptr), N, C, C);
  residual_layernorm_forward(a.x2, a.ln2, a.ln2_mean, a.ln2_rstd, a.x, proj, p("attn.proj.bias"),
                             p("ln2.weight"), p("ln2.bias"), N, C, stream);
  // MLP: out = x2 + proj(gelu(fc(ln2))), GELU in the fc GEMM's epilogue.
  matmul_forward(ctx_, a.fch_gelu, a.fch, a.ln2, p("mlp.fc.weight"), p("mlp.fc.bias"), N, C, 4 * C);
  matmul_forward(ctx_, proj, static_cast<T*>(nullptr), a.fch_gelu, p("mlp.proj.weight"),
                 static_cast<const T*>(nullptr), N, 4 * C, C);
  residual_bias_forward(a.out, a.x2, proj, p("mlp.proj.bias"), N, C, stream);
}

template <class T>
void CudaGpt<T>::head_forward(const T* w, int N) {
  const int C = shape_.d_model;
  Buffers& b = *buffers_;
  const T* x = b.residual + static_cast<long>(shape_.n_layer) * max_batch_ * shape_.seq_len * C;
  layernorm_forward(b.lnf, b.lnf_mean, b.lnf_rstd, x, param(w, layout_, "lnf.weight"),
                    param(w, layout_, "lnf.bias"), N, C, ctx_.stream());
  // The head is tied to wte: logits (N, Vp) = lnf · wteᵀ.
  matmul_forward(ctx_, b.logits, static_cast<T*>(nullptr), b.lnf, param(w, layout_, "wte"),
                 static_cast<const T*>(nullptr), N, C, shape_.padded_vocab());
}

template <class T>
void CudaGpt<T>::forward(const T* w, const std::int32_t* tokens, const std::int32_t* targets, int B,
                         int T_) {
  STRATA_CHECK(B >= 1 && B <= max_batch_ && T_ >= 1 && T_ <= shape_.seq_len);
  const int N = B * T_;
  upload_tokens(tokens, targets, N);
  embed(w, B, T_);
  for (int l = 0; l < shape_.n_layer; ++l) block_forward(layer(l, false), w, l, B, T_);
  head_forward(w, N);
  last_rows_ = N;
  if (targets == nullptr) {  // logits only
    logits_ = buffers_->logits;
    losses_ = nullptr;
    return;
  }
  logits_ = nullptr;  // the probabilities overwrite them
  losses_ = buffers_->losses;
  softmax_crossentropy_forward(buffers_->losses, buffers_->logits, buffers_->logits,
                               buffers_->targets, N, shape_.vocab_size, shape_.padded_vocab(),
                               ctx_.stream());  // the probabilities overwrite the logits
}

template <class T>
void CudaGpt<T>::forward_backward(const T* w, float* grads, const std::int32_t* tokens,
                                  const std::int32_t* targets, int B, int T_, float loss_scale) {
  STRATA_CHECK(B >= 1 && B <= max_batch_ && T_ >= 1 && T_ <= shape_.seq_len);
  STRATA_CHECK(targets != nullptr, "training needs targets");
  const int N = B * T_;
  Buffers& b = *buffers_;
  upload_tokens(tokens, targets, N);
  embed(w, B, T_);
  for (int l = 0; l < shape_.n_layer; ++l) block_forward(layer(l, false), w, l, B, T_);
  head_forward(w, N);
  // d(loss_scale · mean)/d(loss_n) = loss_scale / N: the loss and its logit gradient in one pass,
  // the gradient overwriting the logits.
  fill(b.dlosses, loss_scale / static_cast<float>(N), N, ctx_.stream());
  softmax_crossentropy_forward_backward(b.losses, b.logits, b.logits, b.targets, b.dlosses, N,
                                        shape_.vocab_size, shape_.padded_vocab(), ctx_.stream());
  last_rows_ = N;
  losses_ = b.losses;
  logits_ = nullptr;  // they hold their gradient now
  head_backward(w, grads, N);
  for (int l = shape_.n_layer - 1; l >= 0; --l) block_backward(w, grads, l, B, T_);
  embed_backward(grads, B, T_);
}

template <class T>
void CudaGpt<T>::head_backward(const T* w, float* grads, int N) {
  const int C = shape_.d_model, Vp = shape_.padded_vocab();
  Buffers& b = *buffers_;
  const T* x = b.residual + static_cast<long>(shape_.n_layer) * max_batch_ * shape_.seq_len * C;
  matmul_backward_weight(ctx_, param(grads, layout_, "wte"), nullptr, b.logits, b.lnf, N, C, Vp,
                         scratch_);
  matmul_backward_input(ctx_, b.dln, b.logits, param(w, layout_, "wte"),
                        static_cast<const T*>(nullptr), N, C, Vp);
  STRATA_CUDA_CHECK(
      cudaMemsetAsync(b.dres, 0, static_cast<std::size_t>(N) * C * sizeof(T), ctx_.stream()));
  layernorm_backward(b.dres, param(grads, layout_, "lnf.weight"), param(grads, layout_, "lnf.bias"),
                     b.dln, x, param(w, layout_, "lnf.weight"), b.lnf_mean, b.lnf_rstd, N, C,
                     scratch_, ctx_.stream());
}

template <class T>
void CudaGpt<T>::block_backward(const T* w, float* grads, int l, int B, int T_) {
  const int C = shape_.d_model, N = B * T_;
  auto p = [&](const char* name) { return param(w, layout_, block_name(l, name)); };
  auto g = [&](const char* name) { return param(grads, layout_, block_name(l, name)); };
  cudaStream_t stream = ctx_.stream();
  Buffers& b = *buffers_;
  const Layer a = layer(l, true);
  // Bring back what the forward dropped, by the forward's own code on the same inputs.
  if (recompute_ == Recompute::full)
    block_forward(a, w, l, B, T_);
  else if (recompute_ == Recompute::selective)
    attention_core_forward(a, w, l, B, T_);
  // MLP: out = x2 + h·Wprojᵀ + b, h = gelu(fch); dres is d(loss)/d(out).
  matmul_backward_weight(ctx_, g("mlp.proj.weight"), g("mlp.proj.bias"), b.dres, a.fch_gelu, N,
                         4 * C, C, scratch_);
  matmul_backward_input(ctx_, b.dfch, b.dres, p("mlp.proj.weight"), a.fch, N, 4 * C,
                        C);  // d/d(fch): GELU' in the epilogue
  matmul_backward_weight(ctx_, g("mlp.fc.weight"), g("mlp.fc.bias"), b.dfch, a.ln2, N, C, 4 * C,
                         scratch_);
  matmul_backward_input(ctx_, b.dln, b.dfch, p("mlp.fc.weight"), static_cast<const T*>(nullptr), N,
                        C, 4 * C);
  layernorm_backward(b.dres, g("ln2.weight"), g("ln2.bias"), b.dln, a.x2, p("ln2.weight"),
                     a.ln2_mean, a.ln2_rstd, N, C, scratch_, stream);
  // Attention: x2 = x + atty·Wprojᵀ + b; dres is now d(loss)/d(x2).
  matmul_backward_weight(ctx_, g("attn.proj.weight"), g("attn.proj.bias"), b.dres, a.atty, N, C, C,
                         scratch_);
  matmul_backward_input(ctx_, b.datty, b.dres, p("attn.proj.weight"),
                        static_cast<const T*>(nullptr), N, C, C);
  attention_backward(b.dqkv, b.datty, a.qkv, a.atty, a.lse, B, T_, C, shape_.n_head, scratch_,
                     stream);
  matmul_backward_weight(ctx_, g("attn.qkv.weight"), g("attn.qkv.bias"), b.dqkv, a.ln1, N, C, 3 * C,
                         scratch_);
  matmul_backward_input(ctx_, b.dln, b.dqkv, p("attn.qkv.weight"), static_cast<const T*>(nullptr),
                        N, C, 3 * C);
  layernorm_backward(b.dres, g("ln1.weight"), g("ln1.bias"), b.dln, a.x, p("ln1.weight"),
                     a.ln1_mean, a.ln1_rstd, N, C, scratch_, stream);
}

template <class T>
void CudaGpt<T>::embed_backward(float* grads, int B, int T_) {
  const int C = shape_.d_model, N = B * T_;
  Buffers& b = *buffers_;
  position_embedding_backward(param(grads, layout_, "wpe"), b.dres, 0, N, T_, C, ctx_.stream());
  embedding_shard_backward(param(grads, layout_, "wte"), b.dres, b.tokens, 0, shape_.padded_vocab(),
                           N, C, scratch_, ctx_.stream());
}

template <class T>
double CudaGpt<T>::loss_sum() const {
  STRATA_CHECK(losses_ != nullptr, "loss_sum before a pass with targets");
  std::vector<float> host(static_cast<std::size_t>(last_rows_));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(host.data(), losses_, host.size() * sizeof(float),
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

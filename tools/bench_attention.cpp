// `bench attention`: Strata's fused causal attention (model/kernels/cuda/attention.h) on the GPU,
// forward and backward timed apart with CUDA events, on random qkv of a GPT-2 shape. FLOPs count
// the causal half of the two forward matmuls (2·B·NH·T²·hs) and 2.5× that for the backward's five,
// the convention FlashAttention's papers use, so TFLOP/s compare directly with published library
// figures. Not in builds without CUDA.
//
// Timing, the same for both implementations: one timed repeat is kLaunchesPerRepeat (20)
// back-to-back launches between two events, divided by that count, so host gaps between launches
// (cuDNN's execute call is heavier than a kernel launch) hide behind queued work; the figure is
// the median of --repeats such windows after one untimed window. The launches rotate through
// kBufferSets (3) sets of inputs and outputs, so a launch's buffers were last touched two launches
// earlier, with the other sets' traffic in between: at the default shape one forward alone reads
// and writes about 51 MB (qkv 37.7 MB, out 12.6 MB, lse in bf16), an H100's whole 50 MB L2, so
// inputs arrive cold. Shapes whose three sets together fit in L2 are measured cache-warm.
//
// `kernels` names the kernel set that ran (attention.h: `registers` by default for bf16/fp16,
// `tiles` with STRATA_ATTENTION_KERNELS=tiles and always for fp32).
//
// For bf16 and fp16 the same inputs then go through cuDNN 9's fused flash attention
// (tools/bench_attention_cudnn.h), timed the same way: the line gains cuDNN's times and TFLOP/s,
// which backward graph form cuDNN accepted (`cudnn_backward_form`), the cost of the dQ
// accumulator zeroing included in cuDNN's backward (`cudnn_dq_zero_ms`), Strata's fwd+bwd time
// over cuDNN's (> 1: Strata is slower), and the largest absolute differences between the two
// implementations' out, lse and dqkv over all buffer sets, a sanity check that both computed the
// same attention. cuDNN is timed whether or not Strata's kernel ran: when Strata's kernel fails
// the line says `"strata": "failed"` with `strata_error`, gives cuDNN's figures alone and
// `"cudnn": "timed"` (not "compared"); a CUDA error that poisons the context fails cuDNN too.
// When cuDNN has no engine for the case (and for fp32, which it has no flash path for), cannot be
// loaded, or fails, one line on stderr says so and only Strata's figures are printed.
//
// The comparison is optional in the build (STRATA_CUDNN_BENCH, tools/CMakeLists.txt): a build
// configured without cuDNN's headers times Strata's kernel alone, says so on stderr, and its line
// has `"cudnn": "not built"`.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cpu/precision.h"
#include "tools/bench.h"
#include "train/backend/cuda_training.h"
#include "train/metrics/metrics.h"

#if STRATA_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "model/kernels/cuda/arena.h"
#include "model/kernels/cuda/attention.h"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/device_buffer.h"
#include "model/kernels/cuda/host_dtype.h"
#endif
#if STRATA_HAVE_CUDNN_BENCH
#include "tools/bench_attention_cudnn.h"
#include "tools/bench_cudnn_loader.h"
#endif

namespace strata::bench {

#if STRATA_HAVE_CUDA
namespace {

using cuda::DeviceBuffer;
using cuda::dtype_from_float;
using cuda::dtype_to_float;

// `size` random values in [-1, 1] on the device, drawn from `rng`.
template <class T>
DeviceBuffer<T> random_device_array(std::size_t size, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<T> host(size);
  for (T& x : host) x = dtype_from_float<T>(uniform(rng));
  return DeviceBuffer<T>(host);
}

// Largest |a_i - b_i|, in fp32.
template <class T>
double max_abs_difference(const DeviceBuffer<T>& a, const DeviceBuffer<T>& b) {
  const std::vector<T> host_a = a.download(), host_b = b.download();
  double largest = 0;
  for (std::size_t i = 0; i < host_a.size(); ++i)
    largest = std::max(largest, std::fabs(static_cast<double>(dtype_to_float(host_a[i])) -
                                          static_cast<double>(dtype_to_float(host_b[i]))));
  return largest;
}

// Launches per timed window, and the buffer sets they rotate through (see the header comment).
constexpr int kLaunchesPerRepeat = 20;
constexpr int kBufferSets = 3;
static_assert(kLaunchesPerRepeat >= kBufferSets, "the untimed window must write every set");

// A CUDA event, destroyed when it goes out of scope.
class Event {
 public:
  Event() { STRATA_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() { STRATA_CUDA_REPORT(cudaEventDestroy(event_)); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Median milliseconds per launch: `repeats` windows of kLaunchesPerRepeat back-to-back
// `launch(set)` calls (set = launch index mod kBufferSets) between two events on `stream`, each
// divided by kLaunchesPerRepeat, after one untimed window (which also leaves every set written).
template <class F>
double median_ms_per_launch(cudaStream_t stream, int repeats, const F& launch) {
  const auto window = [&] {
    for (int i = 0; i < kLaunchesPerRepeat; ++i) launch(i % kBufferSets);
  };
  const Event start, stop;
  window();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    STRATA_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    window();
    STRATA_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    STRATA_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0;
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    times.push_back(static_cast<double>(ms) / kLaunchesPerRepeat);
  }
  return median(times);
}

// A non-blocking stream for the timed work.
class Stream {
 public:
  Stream() { STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { STRATA_CUDA_REPORT(cudaStreamDestroy(stream_)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

struct AttentionShape {
  int B, T, NH, hs;
  int C() const { return NH * hs; }
  std::size_t rows() const { return static_cast<std::size_t>(B) * T; }
  // The causal half of the forward's two matmuls; the backward counts 2.5× (see the header).
  double forward_flops() const { return 2.0 * B * NH * static_cast<double>(T) * T * hs; }
};

// One set of inputs, shared by both implementations.
template <class T>
struct AttentionInputs {
  DeviceBuffer<T> qkv;   // (B, T, 3C)
  DeviceBuffer<T> dout;  // (B, T, C)
};

// kBufferSets sets of random inputs in [-1, 1] (fixed seed), each different.
template <class T>
std::vector<AttentionInputs<T>> random_inputs(const AttentionShape& shape) {
  std::mt19937 rng(11);
  std::vector<AttentionInputs<T>> inputs;
  inputs.reserve(kBufferSets);
  for (int set = 0; set < kBufferSets; ++set) {
    DeviceBuffer<T> qkv = random_device_array<T>(shape.rows() * 3 * shape.C(), rng);
    DeviceBuffer<T> dout = random_device_array<T>(shape.rows() * shape.C(), rng);
    inputs.push_back(AttentionInputs<T>{std::move(qkv), std::move(dout)});
  }
  return inputs;
}

// What one implementation wrote for one set of inputs.
template <class T>
struct AttentionOutputs {
  explicit AttentionOutputs(const AttentionShape& shape)
      : out(shape.rows() * shape.C()),
        dqkv(shape.rows() * 3 * shape.C()),
        lse(shape.rows() * shape.NH) {}
  DeviceBuffer<T> out, dqkv;
  // (B, NH, T): Strata's lse, cuDNN's softmax stats (the same quantity).
  DeviceBuffer<float> lse;
};

// One implementation's outputs, one per buffer set.
template <class T>
std::vector<AttentionOutputs<T>> output_sets(const AttentionShape& shape) {
  std::vector<AttentionOutputs<T>> outputs;
  outputs.reserve(kBufferSets);
  for (int set = 0; set < kBufferSets; ++set) outputs.emplace_back(shape);
  return outputs;
}

struct PassTimes {
  double forward_ms, backward_ms;
  double total_ms() const { return forward_ms + backward_ms; }
};

// `<prefix>forward_ms` ... `<prefix>total_tflops` for one implementation.
void add_pass_figures(JsonLine& json, const std::string& prefix, const PassTimes& times,
                      double forward_flops) {
  const double backward_flops = 2.5 * forward_flops;
  json.add(prefix + "forward_ms", times.forward_ms, "%.4f")
      .add(prefix + "backward_ms", times.backward_ms, "%.4f")
      .add(prefix + "forward_tflops", forward_flops / times.forward_ms * 1e-9, "%.2f")
      .add(prefix + "backward_tflops", backward_flops / times.backward_ms * 1e-9, "%.2f")
      .add(prefix + "total_tflops", (forward_flops + backward_flops) / times.total_ms() * 1e-9,
           "%.2f");
}

// An exception's message on one line, for the stderr line and the JSON value that quote it.
std::string one_line(const char* message) {
  std::string line = message;
  for (char& c : line)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return line;
}

// Largest |a - b| of one output over all buffer sets.
template <class T, class Member>
double max_abs_difference_over_sets(const std::vector<AttentionOutputs<T>>& a,
                                    const std::vector<AttentionOutputs<T>>& b, Member member) {
  double largest = 0;
  for (std::size_t set = 0; set < a.size(); ++set)
    largest = std::max(largest, max_abs_difference(a[set].*member, b[set].*member));
  return largest;
}

template <class T>
PassTimes time_strata(const AttentionShape& shape, const std::vector<AttentionInputs<T>>& inputs,
                      std::vector<AttentionOutputs<T>>& outputs, int repeats, cudaStream_t stream) {
  cuda::DeviceArena arena(std::size_t{64} << 20);
  const int B = shape.B, T_ = shape.T, C = shape.C(), NH = shape.NH;
  PassTimes times{};
  times.forward_ms = median_ms_per_launch(stream, repeats, [&](int set) {
    cuda::attention_forward(outputs[set].out.get(), outputs[set].lse.get(), inputs[set].qkv.get(),
                            B, T_, C, NH, NH, stream);
  });
  times.backward_ms = median_ms_per_launch(stream, repeats, [&](int set) {
    cuda::attention_backward(outputs[set].dqkv.get(), inputs[set].dout.get(), inputs[set].qkv.get(),
                             outputs[set].out.get(), outputs[set].lse.get(), B, T_, C, NH, NH,
                             arena, stream);
  });
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  return times;
}

// Strata's run: its times and outputs, or why it failed.
template <class T>
struct StrataRun {
  std::optional<PassTimes> times;
  std::vector<AttentionOutputs<T>> outputs;
  std::string error;
};

#if STRATA_HAVE_CUDNN_BENCH
// Times cuDNN on the same inputs and adds its figures to `json`, and when Strata ran (`strata`
// has times) the differences from Strata's outputs; when cuDNN has no engine for the case, says
// so on stderr and adds only that.
template <class T>
void time_cudnn(JsonLine& json, const AttentionShape& shape,
                const std::vector<AttentionInputs<T>>& inputs, const StrataRun<T>& strata,
                int repeats, cudaStream_t stream) {
  std::string why;
  if (!cudnn_available(&why)) {
    std::fprintf(stderr, "bench attention: cuDNN could not be loaded, comparing nothing: %s\n",
                 why.c_str());
    json.add("cudnn", "not available");
    return;
  }
  const AttentionIoType io =
      std::is_same_v<T, __nv_bfloat16> ? AttentionIoType::bf16 : AttentionIoType::fp16;
  try {
    CudnnAttention cudnn(shape.B, shape.T, shape.C(), shape.NH, io, stream);
    if (!cudnn.backward_fallback_reason().empty())
      std::fprintf(stderr,
                   "bench attention: cuDNN rejected the legacy backward graph, running the "
                   "current form: %s\n",
                   cudnn.backward_fallback_reason().c_str());
    std::vector<AttentionOutputs<T>> outputs = output_sets<T>(shape);
    for (int set = 0; set < kBufferSets; ++set)
      cudnn.bind({inputs[set].qkv.get(), outputs[set].out.get(), outputs[set].lse.get(),
                  inputs[set].dout.get(), outputs[set].dqkv.get()});
    PassTimes times{};
    times.forward_ms = median_ms_per_launch(
        stream, repeats, [&](int set) { cudnn.forward(static_cast<std::size_t>(set)); });
    times.backward_ms = median_ms_per_launch(
        stream, repeats, [&](int set) { cudnn.backward(static_cast<std::size_t>(set)); });
    const double zero_ms =
        median_ms_per_launch(stream, repeats, [&](int) { cudnn.zero_dq_accumulator(); });
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
    json.add("cudnn", strata.times ? "compared" : "timed")
        .add("cudnn_backward_form", backward_form_name(cudnn.backward_form()));
    add_pass_figures(json, "cudnn_", times, shape.forward_flops());
    json.add("cudnn_dq_zero_ms", zero_ms, "%.4f");
    if (strata.times) {
      json.add("strata_over_cudnn_time", strata.times->total_ms() / times.total_ms(), "%.3f")
          .add("out_max_abs_diff",
               max_abs_difference_over_sets(strata.outputs, outputs, &AttentionOutputs<T>::out),
               "%.3g")
          .add("lse_max_abs_diff",
               max_abs_difference_over_sets(strata.outputs, outputs, &AttentionOutputs<T>::lse),
               "%.3g")
          .add("dqkv_max_abs_diff",
               max_abs_difference_over_sets(strata.outputs, outputs, &AttentionOutputs<T>::dqkv),
               "%.3g");
    }
  } catch (const CudnnUnsupported& unsupported) {
    std::fprintf(stderr,
                 "bench attention: cuDNN has no engine for this case, comparing nothing: %s\n",
                 unsupported.what());
    json.add("cudnn", "unsupported");
  } catch (const Error& failed) {
    // Another card or cuDNN version may reject the graph: that must not cost Strata's own figures.
    std::fprintf(stderr, "bench attention: the cuDNN comparison failed, comparing nothing: %s\n",
                 failed.what());
    json.add("cudnn", "failed");
  }
}
#endif

template <class T>
void run_attention(const AttentionShape& shape, int repeats, const std::string& dtype) {
  cudaDeviceProp properties{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  const std::vector<AttentionInputs<T>> inputs = random_inputs<T>(shape);
  Stream stream;
  JsonLine json;
  json.add("bench", "attention")
      .add("device_name", properties.name)
      .add("dtype", dtype)
      .add("kernels",
           std::is_same_v<T, float> || cuda::attention_kernels() == cuda::AttentionKernels::tiles
               ? "tiles"
               : "registers")
      .add("batch", shape.B)
      .add("seq_len", shape.T)
      .add("heads", shape.NH)
      .add("head_size", shape.hs)
      .add("repeats", repeats)
      .add("launches_per_repeat", kLaunchesPerRepeat)
      .add("buffer_sets", kBufferSets);

  // Strata's failure (a kernel that does not launch, or faults) costs its own figures only:
  // cuDNN is still timed below.
  StrataRun<T> strata;
  try {
    strata.outputs = output_sets<T>(shape);
    strata.times = time_strata(shape, inputs, strata.outputs, repeats, stream.get());
  } catch (const std::exception& failed) {
    strata.times.reset();
    strata.error = one_line(failed.what());
    std::fprintf(stderr, "bench attention: Strata's attention kernel failed: %s\n",
                 strata.error.c_str());
  }
  if (strata.times) {
    json.add("strata", "timed");
    add_pass_figures(json, "", *strata.times, shape.forward_flops());
  } else {
    json.add("strata", "failed").add("strata_error", strata.error);
  }

#if STRATA_HAVE_CUDNN_BENCH
  if constexpr (std::is_same_v<T, float>) {
    std::fprintf(stderr,
                 "bench attention: cuDNN has no fp32 flash attention, comparing nothing "
                 "(use --dtype bf16 or fp16)\n");
    json.add("cudnn", "no fp32 path");
  } else {
    time_cudnn(json, shape, inputs, strata, repeats, stream.get());
  }
#else
  std::fprintf(stderr,
               "bench attention: the cuDNN comparison was not built in (configured without "
               "cuDNN's headers, STRATA_CUDNN_BENCH): timing Strata's kernel alone\n");
  json.add("cudnn", "not built");
#endif
  std::printf("%s\n", json.str().c_str());
  // The line is out; a failed Strata run still fails the command (gpu_check.sh reports the exit).
  if (!strata.times) fail("bench attention: Strata's attention kernel failed: ", strata.error);
}

}  // namespace
#endif

CommandSpec attention_command() {
  return {
      "usage: bench attention [--device auto|cpu|cuda] [--batch B] [--seq-len T] [--heads H] "
      "[--head-size D] [--dtype fp32|bf16|fp16] [--repeats R]",
      "Times Strata's causal attention, forward and backward: on the GPU beside cuDNN's where "
      "that comparison is built in, or the CPU backend's kernel (--device cpu, or auto without a "
      "GPU): one JSON line.",
      {{"--device", "auto|cpu|cuda", "auto",
        "the backend timed (auto: cuda where a GPU is usable)"},
       {"--batch", "B", "8", "sequences"},
       {"--seq-len", "T", "1024", "tokens a sequence"},
       {"--heads", "H", "12", "attention heads"},
       {"--head-size", "D", "64", "channels a head: a multiple of 16 up to 128"},
       {"--dtype", "fp32|bf16|fp16", "bf16", "the activations' type"},
       {"--repeats", "R", "20", "timed runs (median reported)"}}};
}

void bench_attention(const ToolArgs& args) {
  const int B = positive(args, "--batch"), T_ = positive(args, "--seq-len");
  const int NH = positive(args, "--heads"), hs = positive(args, "--head-size");
  const int repeats = positive(args, "--repeats");
  const std::string dtype = args.get("--dtype");
  const auto compute = cpu::kComputeDtypeChoices.find(dtype);
  if (!compute) fail("--dtype must be ", cpu::kComputeDtypeChoices.list(), ", got '", dtype, "'");
  const std::string device = args.get("--device");
  if (device != "auto" && device != "cpu" && device != "cuda")
    fail("--device must be auto, cpu or cuda, got '", device, "'");
  if (device == "cpu" || (device == "auto" && (!STRATA_HAVE_CUDA || cuda_device_count() == 0)))
    return bench_attention_cpu(B, T_, NH, hs, *compute, repeats);
#if STRATA_HAVE_CUDA
  if (cuda_device_count() == 0) fail("bench attention: no usable CUDA device");
  if (!cuda::attention_head_size_supported(hs))
    fail("--head-size ", hs,
         " is not supported by the attention kernel (a multiple of 16 up to 128)");
  const AttentionShape shape{B, T_, NH, hs};
  switch (*compute) {
    case cpu::ComputeDtype::bf16:
      return run_attention<__nv_bfloat16>(shape, repeats, dtype);
    case cpu::ComputeDtype::fp16:
      return run_attention<__half>(shape, repeats, dtype);
    case cpu::ComputeDtype::fp32:
      return run_attention<float>(shape, repeats, dtype);
  }
#else
  (void)B, (void)T_, (void)NH, (void)hs, (void)repeats, (void)compute;
  fail("bench attention --device cuda needs the CUDA backend (this build has none)");
#endif
}

}  // namespace strata::bench

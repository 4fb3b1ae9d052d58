// cuDNN's backend (graph) API with owned descriptors and checked statuses, for the benchmarks that
// compare Strata's kernels with cuDNN's fused engines (tools/bench_attention_cudnn.h). The
// cudnn_frontend headers are not installed, so graphs are built here from backend descriptors
// directly: tensors and operations into an operation graph, an execution plan from cuDNN's
// heuristics, and variant packs (uid -> pointer bindings) built once per set of buffers, so that an
// execution is one cudnnBackendExecute call.
//
// A plan is kept together with everything it was built from (ExecutionPlan: the graph's tensors and
// operations, the operation graph, the heuristics query and the chosen engine configuration), as
// cudnn_frontend keeps that chain alive beside its plans: cuDNN documents copying what it needs at
// finalisation, but nothing here relies on that.
//
// Every cuDNN call goes through STRATA_CUDNN_CHECK. A status in cuDNN's NOT_SUPPORTED category (no
// engine for this pattern, shape, layout or data type) throws CudnnUnsupported, which a benchmark
// reports in one line and skips; any other failure throws strata::Error naming the call, file and
// line with cuDNN's own message.
#pragma once

#include <cudnn_graph.h>

#include <array>
#include <cstdint>
#include <vector>

#include "model/core/error.h"

namespace strata::bench {

// cuDNN has no engine for the graph (or one of its parts) on this GPU, shape or data type.
class CudnnUnsupported : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file,
                                    int line);

}  // namespace strata::bench

#define STRATA_CUDNN_CHECK(call)                                                           \
  do {                                                                                     \
    const cudnnStatus_t strata_cudnn_status_ = (call);                                     \
    if (strata_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                      \
      ::strata::bench::throw_cudnn_error(strata_cudnn_status_, #call, __FILE__, __LINE__); \
  } while (0)

namespace strata::bench {

// A cuDNN library context (cudnnCreate needs a CUDA device).
class CudnnHandle {
 public:
  CudnnHandle();
  ~CudnnHandle();
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  cudnnHandle_t get() const { return handle_; }

 private:
  cudnnHandle_t handle_ = nullptr;
};

// Owns one backend descriptor. Setting an attribute to another descriptor copies what cuDNN needs
// from it, but the owners here are kept alive as long as the plan anyway (ExecutionPlan).
class BackendDescriptor {
 public:
  // No descriptor yet (a moved-from or not-yet-built member).
  BackendDescriptor() = default;
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type);
  ~BackendDescriptor();
  BackendDescriptor(BackendDescriptor&& other) noexcept;
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return descriptor_; }

  // `count` values of `type` (the C type cuDNN documents for it) at `values`.
  BackendDescriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                         std::int64_t count, const void* values);
  template <class Value>
  BackendDescriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                         const Value& value) {
    return set(name, type, 1, &value);
  }
  BackendDescriptor& set_descriptor(cudnnBackendAttributeName_t name,
                                    cudnnBackendDescriptor_t value);
  void finalize();

 private:
  cudnnBackendDescriptor_t descriptor_ = nullptr;
};

// Dimensions or strides of a rank-4 tensor, outermost first (cuDNN's order).
using Dims4 = std::array<std::int64_t, 4>;

// Builds one operation graph. Tensor and operation calls return the tensor descriptor (the output,
// for operations), which lives as long as the builder; operations are recorded in call order.
class GraphBuilder {
 public:
  // A tensor in device memory, bound to a pointer by `uid` at execution.
  cudnnBackendDescriptor_t tensor(
      std::int64_t uid, cudnnDataType_t type, const Dims4& dims, const Dims4& strides,
      cudnnBackendTensorReordering_t reordering = CUDNN_TENSOR_REORDERING_NONE);
  // A host scalar passed by value at execution (bound by `uid` to its host address).
  cudnnBackendDescriptor_t scalar(std::int64_t uid, cudnnDataType_t type);
  // An intermediate that a fused engine keeps on chip; uids from 1000 up (keep real ones below).
  cudnnBackendDescriptor_t virtual_tensor(cudnnDataType_t type, const Dims4& dims,
                                          const Dims4& strides);

  // c = a · b over the last two dimensions, batched over the first two; fp32 accumulation.
  cudnnBackendDescriptor_t matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                                  cudnnBackendDescriptor_t c);
  // y = mode(x), y = mode(x, b), or y = mode(x, b, t) (BINARY_SELECT: t ? x : b), computed in
  // `math`; operands broadcast over dimensions of size 1.
  cudnnBackendDescriptor_t pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math,
                                     cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);
  cudnnBackendDescriptor_t pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math,
                                     cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                     cudnnBackendDescriptor_t y);
  cudnnBackendDescriptor_t pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math,
                                     cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                     cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y);
  // y = the index of each element of x along `axis` (CUDNN_POINTWISE_GEN_INDEX), as int32.
  cudnnBackendDescriptor_t index(std::int64_t axis, cudnnBackendDescriptor_t x,
                                 cudnnBackendDescriptor_t y);
  // y = x reduced over the dimensions where y has size 1, in fp32.
  cudnnBackendDescriptor_t reduction(cudnnReduceTensorOp_t op, cudnnBackendDescriptor_t x,
                                     cudnnBackendDescriptor_t y);
  // y = x seen through y's dimensions and strides (a transpose when they swap).
  cudnnBackendDescriptor_t reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);

  // The finalized operation graph of everything recorded so far.
  BackendDescriptor finish(cudnnHandle_t handle);

 private:
  cudnnBackendDescriptor_t keep(BackendDescriptor descriptor);
  cudnnBackendDescriptor_t add_pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math,
                                         const std::int64_t* axis, cudnnBackendDescriptor_t x,
                                         cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                                         cudnnBackendDescriptor_t y);

  std::vector<BackendDescriptor> owned_;
  std::vector<cudnnBackendDescriptor_t> operations_;
  std::int64_t next_virtual_uid_ = 1000;
};

// An execution plan and the whole chain it was built from, alive as long as the plan (declaration
// order = construction order; destroyed in reverse, the plan first).
struct ExecutionPlan {
  GraphBuilder graph;                 // tensors and operations
  BackendDescriptor operation_graph;  // finalized from `graph`
  BackendDescriptor heuristics;       // the query that proposed `engine_config`
  BackendDescriptor engine_config;
  BackendDescriptor plan;

  // Device scratch bytes the plan needs at execution.
  std::int64_t workspace_bytes() const;
};

// The operation graph of `graph` and an execution plan for it: the first engine configuration
// proposed by cuDNN's heuristics (mode A, then FALLBACK) that finalizes. CudnnUnsupported when
// none does.
ExecutionPlan build_plan(cudnnHandle_t handle, GraphBuilder graph);

// One binding of the variant pack: a device pointer, or a host address for a by-value scalar.
struct UidPointer {
  std::int64_t uid;
  void* pointer;
};

// A finalized variant pack: `bindings` and the plan's `workspace`. Every pointer in it (device
// buffers, host scalars, workspace) must stay valid while the pack is executed.
BackendDescriptor make_variant_pack(const std::vector<UidPointer>& bindings, void* workspace);

// Enqueues `plan` with `variant_pack` on the stream set on `handle` (cudnnSetStream); nothing else
// (no descriptor is built or destroyed), so a timed execution is cuDNN's launch alone.
void execute_plan(cudnnHandle_t handle, const ExecutionPlan& plan,
                  const BackendDescriptor& variant_pack);

}  // namespace strata::bench

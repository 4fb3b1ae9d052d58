#include "tools/bench_cudnn_graph.h"

#include <cstdio>
#include <string>
#include <utility>

namespace strata::bench {

namespace {

// cuDNN keeps the reason for the last failure on this thread (which descriptor, which constraint):
// far more useful than the status name alone. Empty when it has none.
std::string last_error_detail() {
  char detail[1024] = {};
  cudnnGetLastErrorString(detail, sizeof detail);
  return detail[0] != '\0' ? std::string(": ") + detail : std::string();
}

}  // namespace

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  const std::string message = std::string("cuDNN error ") + cudnnGetErrorString(status) + " in " +
                              call + " at " + file + ":" + std::to_string(line) +
                              last_error_detail();
  if (CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED) throw CudnnUnsupported(message);
  throw Error(message);
}

CudnnHandle::CudnnHandle() { STRATA_CUDNN_CHECK(cudnnCreate(&handle_)); }

CudnnHandle::~CudnnHandle() {
  // Destructors must not throw: report instead.
  const cudnnStatus_t status = cudnnDestroy(handle_);
  if (status != CUDNN_STATUS_SUCCESS)
    std::fprintf(stderr, "cuDNN error %s in cudnnDestroy\n", cudnnGetErrorString(status));
}

BackendDescriptor::BackendDescriptor(cudnnBackendDescriptorType_t type) {
  STRATA_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &descriptor_));
}

BackendDescriptor::~BackendDescriptor() {
  if (descriptor_ == nullptr) return;
  const cudnnStatus_t status = cudnnBackendDestroyDescriptor(descriptor_);
  if (status != CUDNN_STATUS_SUCCESS)
    std::fprintf(stderr, "cuDNN error %s in cudnnBackendDestroyDescriptor\n",
                 cudnnGetErrorString(status));
}

BackendDescriptor::BackendDescriptor(BackendDescriptor&& other) noexcept
    : descriptor_(std::exchange(other.descriptor_, nullptr)) {}

BackendDescriptor& BackendDescriptor::operator=(BackendDescriptor&& other) noexcept {
  std::swap(descriptor_, other.descriptor_);
  return *this;
}

BackendDescriptor& BackendDescriptor::set(cudnnBackendAttributeName_t name,
                                          cudnnBackendAttributeType_t type, std::int64_t count,
                                          const void* values) {
  STRATA_CUDNN_CHECK(cudnnBackendSetAttribute(descriptor_, name, type, count, values));
  return *this;
}

BackendDescriptor& BackendDescriptor::set_descriptor(cudnnBackendAttributeName_t name,
                                                     cudnnBackendDescriptor_t value) {
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, value);
}

void BackendDescriptor::finalize() { STRATA_CUDNN_CHECK(cudnnBackendFinalize(descriptor_)); }

// ----- GraphBuilder -----

namespace {

// 16-byte alignment lets cuDNN pick its tensor-core engines (cudnn_frontend's default too); every
// device pointer bound here is at least that aligned.
constexpr std::int64_t kTensorAlignment = 16;

BackendDescriptor make_tensor(std::int64_t uid, cudnnDataType_t type, const Dims4& dims,
                              const Dims4& strides, bool is_virtual, bool by_value,
                              cudnnBackendTensorReordering_t reordering) {
  BackendDescriptor tensor(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  tensor.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, kTensorAlignment)
      .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, is_virtual)
      .set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, by_value);
  if (reordering != CUDNN_TENSOR_REORDERING_NONE)
    tensor.set(CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, reordering);
  tensor.finalize();
  return tensor;
}

}  // namespace

cudnnBackendDescriptor_t GraphBuilder::keep(BackendDescriptor descriptor) {
  owned_.push_back(std::move(descriptor));
  return owned_.back().get();
}

cudnnBackendDescriptor_t GraphBuilder::tensor(std::int64_t uid, cudnnDataType_t type,
                                              const Dims4& dims, const Dims4& strides,
                                              cudnnBackendTensorReordering_t reordering) {
  return keep(make_tensor(uid, type, dims, strides, false, false, reordering));
}

cudnnBackendDescriptor_t GraphBuilder::scalar(std::int64_t uid, cudnnDataType_t type) {
  const Dims4 ones = {1, 1, 1, 1};
  return keep(make_tensor(uid, type, ones, ones, false, true, CUDNN_TENSOR_REORDERING_NONE));
}

cudnnBackendDescriptor_t GraphBuilder::virtual_tensor(cudnnDataType_t type, const Dims4& dims,
                                                      const Dims4& strides) {
  return keep(make_tensor(next_virtual_uid_++, type, dims, strides, true, false,
                          CUDNN_TENSOR_REORDERING_NONE));
}

cudnnBackendDescriptor_t GraphBuilder::matmul(cudnnBackendDescriptor_t a,
                                              cudnnBackendDescriptor_t b,
                                              cudnnBackendDescriptor_t c) {
  BackendDescriptor product(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  product.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT).finalize();
  BackendDescriptor operation(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  operation.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, product.get())
      .finalize();
  keep(std::move(product));
  operations_.push_back(keep(std::move(operation)));
  return c;
}

cudnnBackendDescriptor_t GraphBuilder::add_pointwise(cudnnPointwiseMode_t mode,
                                                     cudnnDataType_t math, const std::int64_t* axis,
                                                     cudnnBackendDescriptor_t x,
                                                     cudnnBackendDescriptor_t b,
                                                     cudnnBackendDescriptor_t t,
                                                     cudnnBackendDescriptor_t y) {
  BackendDescriptor function(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  function.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, math);
  if (axis != nullptr) function.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, *axis);
  function.finalize();
  BackendDescriptor operation(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  operation.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, function.get())
      .set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b != nullptr) operation.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
  if (t != nullptr) operation.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
  operation.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y).finalize();
  keep(std::move(function));
  operations_.push_back(keep(std::move(operation)));
  return y;
}

cudnnBackendDescriptor_t GraphBuilder::pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math,
                                                 cudnnBackendDescriptor_t x,
                                                 cudnnBackendDescriptor_t y) {
  return add_pointwise(mode, math, nullptr, x, nullptr, nullptr, y);
}

cudnnBackendDescriptor_t GraphBuilder::pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math,
                                                 cudnnBackendDescriptor_t x,
                                                 cudnnBackendDescriptor_t b,
                                                 cudnnBackendDescriptor_t y) {
  return add_pointwise(mode, math, nullptr, x, b, nullptr, y);
}

cudnnBackendDescriptor_t GraphBuilder::pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math,
                                                 cudnnBackendDescriptor_t x,
                                                 cudnnBackendDescriptor_t b,
                                                 cudnnBackendDescriptor_t t,
                                                 cudnnBackendDescriptor_t y) {
  return add_pointwise(mode, math, nullptr, x, b, t, y);
}

cudnnBackendDescriptor_t GraphBuilder::index(std::int64_t axis, cudnnBackendDescriptor_t x,
                                             cudnnBackendDescriptor_t y) {
  return add_pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, &axis, x, nullptr, nullptr, y);
}

cudnnBackendDescriptor_t GraphBuilder::reduction(cudnnReduceTensorOp_t op,
                                                 cudnnBackendDescriptor_t x,
                                                 cudnnBackendDescriptor_t y) {
  BackendDescriptor function(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  function.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, op)
      .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .finalize();
  BackendDescriptor operation(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  operation.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
      .set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
      .set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, function.get())
      .finalize();
  keep(std::move(function));
  operations_.push_back(keep(std::move(operation)));
  return y;
}

cudnnBackendDescriptor_t GraphBuilder::reshape(cudnnBackendDescriptor_t x,
                                               cudnnBackendDescriptor_t y) {
  BackendDescriptor operation(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  operation.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x)
      .set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y)
      .finalize();
  operations_.push_back(keep(std::move(operation)));
  return y;
}

BackendDescriptor GraphBuilder::finish(cudnnHandle_t handle) {
  BackendDescriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle)
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
           static_cast<std::int64_t>(operations_.size()), operations_.data())
      .finalize();
  return graph;
}

// ----- plans and execution -----

ExecutionPlan build_plan(cudnnHandle_t handle, GraphBuilder graph) {
  BackendDescriptor operation_graph = graph.finish(handle);
  std::string last_failure = "the heuristics proposed no engine";
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    BackendDescriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heuristics.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, operation_graph.get())
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode);
    // A mode with nothing for this graph may refuse to finalize; the other mode may still have it.
    const cudnnStatus_t heuristics_status = cudnnBackendFinalize(heuristics.get());
    if (heuristics_status != CUDNN_STATUS_SUCCESS) {
      last_failure = std::string("the heuristics failed with ") +
                     cudnnGetErrorString(heuristics_status) + last_error_detail();
      continue;
    }
    // Asking for zero results returns how many there are.
    std::int64_t count = 0;
    STRATA_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
    std::vector<BackendDescriptor> configs;
    std::vector<cudnnBackendDescriptor_t> raw_configs;
    for (std::int64_t i = 0; i < count; ++i) {
      configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw_configs.push_back(configs.back().get());
    }
    if (count > 0)
      STRATA_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                                  raw_configs.data()));
    for (std::int64_t i = 0; i < count; ++i) {
      // A configuration whose engine cannot take this graph fails to finalize: try the next.
      BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle)
          .set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, raw_configs[i]);
      const cudnnStatus_t status = cudnnBackendFinalize(plan.get());
      if (status == CUDNN_STATUS_SUCCESS) {
        // The chain stays with the plan (the configurations not chosen are dropped).
        return ExecutionPlan{std::move(graph), std::move(operation_graph), std::move(heuristics),
                             std::move(configs[static_cast<std::size_t>(i)]), std::move(plan)};
      }
      last_failure = std::string("the last engine proposed failed with ") +
                     cudnnGetErrorString(status) + last_error_detail();
    }
  }
  throw CudnnUnsupported("no cuDNN execution plan for this graph (" + last_failure + ")");
}

std::int64_t ExecutionPlan::workspace_bytes() const {
  std::int64_t bytes = 0, returned = 0;
  STRATA_CUDNN_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                              CUDNN_TYPE_INT64, 1, &returned, &bytes));
  return bytes;
}

BackendDescriptor make_variant_pack(const std::vector<UidPointer>& bindings, void* workspace) {
  std::vector<std::int64_t> uids;
  std::vector<void*> pointers;
  for (const UidPointer& binding : bindings) {
    uids.push_back(binding.uid);
    pointers.push_back(binding.pointer);
  }
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const auto count = static_cast<std::int64_t>(bindings.size());
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, uids.data())
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count, pointers.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace)
      .finalize();
  return pack;
}

void execute_plan(cudnnHandle_t handle, const ExecutionPlan& plan,
                  const BackendDescriptor& variant_pack) {
  STRATA_CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan.get(), variant_pack.get()));
}

}  // namespace strata::bench

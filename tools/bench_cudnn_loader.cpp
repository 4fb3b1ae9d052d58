// The cuDNN entry points of bench_cudnn_graph.cpp and bench_attention_cudnn.cpp, resolved from
// libcudnn.so.9 at first use (see bench_cudnn_loader.h). Each keeps the signature cudnn_graph.h
// declares, so the callers compile against the real headers unchanged.
#include "tools/bench_cudnn_loader.h"

#include <cudnn_graph.h>
#include <dlfcn.h>

#include <cstring>

namespace strata::bench {
namespace {

struct Library {
  void* handle = nullptr;
  std::string error;
};

const Library& library() {
  static const Library loaded = [] {
    Library l;
    // RTLD_LOCAL: the library's own calls never resolve to the forwarders below.
    for (const char* name : {"libcudnn.so.9", "libcudnn.so"}) {
      l.handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (l.handle != nullptr) return l;
      const char* reason = dlerror();
      l.error = reason != nullptr ? reason : "dlopen failed";
    }
    return l;
  }();
  return loaded;
}

template <class Function>
Function resolve(const char* name) {
  const Library& l = library();
  return l.handle == nullptr ? nullptr : reinterpret_cast<Function>(dlsym(l.handle, name));
}

}  // namespace

bool cudnn_available(std::string* why) {
  const Library& l = library();
  if (l.handle == nullptr && why != nullptr) *why = l.error;
  return l.handle != nullptr;
}

}  // namespace strata::bench

using strata::bench::resolve;

cudnnStatus_t CUDNNWINAPI cudnnCreate(cudnnHandle_t* handle) {
  static const auto real = resolve<decltype(&cudnnCreate)>("cudnnCreate");
  return real != nullptr ? real(handle) : CUDNN_STATUS_NOT_INITIALIZED;
}

cudnnStatus_t CUDNNWINAPI cudnnDestroy(cudnnHandle_t handle) {
  static const auto real = resolve<decltype(&cudnnDestroy)>("cudnnDestroy");
  return real != nullptr ? real(handle) : CUDNN_STATUS_NOT_INITIALIZED;
}

cudnnStatus_t CUDNNWINAPI cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  static const auto real = resolve<decltype(&cudnnSetStream)>("cudnnSetStream");
  return real != nullptr ? real(handle, stream) : CUDNN_STATUS_NOT_INITIALIZED;
}

const char* CUDNNWINAPI cudnnGetErrorString(cudnnStatus_t status) {
  static const auto real = resolve<decltype(&cudnnGetErrorString)>("cudnnGetErrorString");
  return real != nullptr ? real(status) : "cuDNN is not loaded";
}

void CUDNNWINAPI cudnnGetLastErrorString(char* message, size_t max_size) {
  static const auto real = resolve<decltype(&cudnnGetLastErrorString)>("cudnnGetLastErrorString");
  if (real != nullptr) return real(message, max_size);
  if (max_size == 0) return;
  std::string why;
  strata::bench::cudnn_available(&why);
  std::strncpy(message, why.c_str(), max_size - 1);
  message[max_size - 1] = '\0';
}

cudnnStatus_t CUDNNWINAPI cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                                       cudnnBackendDescriptor_t* descriptor) {
  static const auto real =
      resolve<decltype(&cudnnBackendCreateDescriptor)>("cudnnBackendCreateDescriptor");
  return real != nullptr ? real(type, descriptor) : CUDNN_STATUS_NOT_INITIALIZED;
}

cudnnStatus_t CUDNNWINAPI cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  static const auto real =
      resolve<decltype(&cudnnBackendDestroyDescriptor)>("cudnnBackendDestroyDescriptor");
  return real != nullptr ? real(descriptor) : CUDNN_STATUS_NOT_INITIALIZED;
}

cudnnStatus_t CUDNNWINAPI cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  static const auto real = resolve<decltype(&cudnnBackendFinalize)>("cudnnBackendFinalize");
  return real != nullptr ? real(descriptor) : CUDNN_STATUS_NOT_INITIALIZED;
}

cudnnStatus_t CUDNNWINAPI cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                                   cudnnBackendAttributeName_t name,
                                                   cudnnBackendAttributeType_t type, int64_t count,
                                                   const void* elements) {
  static const auto real = resolve<decltype(&cudnnBackendSetAttribute)>("cudnnBackendSetAttribute");
  return real != nullptr ? real(descriptor, name, type, count, elements)
                         : CUDNN_STATUS_NOT_INITIALIZED;
}

cudnnStatus_t CUDNNWINAPI cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                                   cudnnBackendAttributeName_t name,
                                                   cudnnBackendAttributeType_t type,
                                                   int64_t requested, int64_t* count,
                                                   void* elements) {
  static const auto real = resolve<decltype(&cudnnBackendGetAttribute)>("cudnnBackendGetAttribute");
  return real != nullptr ? real(descriptor, name, type, requested, count, elements)
                         : CUDNN_STATUS_NOT_INITIALIZED;
}

cudnnStatus_t CUDNNWINAPI cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                              cudnnBackendDescriptor_t variant_pack) {
  static const auto real = resolve<decltype(&cudnnBackendExecute)>("cudnnBackendExecute");
  return real != nullptr ? real(handle, plan, variant_pack) : CUDNN_STATUS_NOT_INITIALIZED;
}

# Finds the fixed dependency set (Debian packages; scripts/setup.sh installs them).
find_package(OpenMP REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(PkgConfig REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(HDF5 REQUIRED COMPONENTS C)
find_package(GTest REQUIRED)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)  # SHA-256 (data/sha256.h)

pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
# nlohmann-json: the JSON parser behind data/json_value.h (header-only).
find_package(nlohmann_json 3 REQUIRED)
# XXH3-64, the byte checksum of checkpoints of format 4 (train/checkpoint/checkpoint_format.h)
# and of token shards' chunks (data/shard_checksums.h).
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# hiredis: the Redis client of elastic DiLoCo's rendezvous store (parallel/elastic/redis_store.h).
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
# Gloo (TCP transport): the outer collectives between elastic DiLoCo's worker jobs
# (parallel/elastic/gloo_communicator.h). Debian's package installs its CMake config.
find_package(Gloo REQUIRED)
# ZeroMQ: the requests between SWARM's peers (parallel/swarm/swarm_transport.h). libzmq through
# pkg-config like the other C libraries; cppzmq, its C++ binding, is headers only (zmq.hpp,
# zmq_addon.hpp), so finding the header is all it takes.
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
find_path(CPPZMQ_INCLUDE_DIR zmq.hpp HINTS ${ZMQ_INCLUDE_DIRS})
if(NOT CPPZMQ_INCLUDE_DIR)
  message(FATAL_ERROR "cppzmq's zmq.hpp was not found: install cppzmq-dev (scripts/setup.sh)")
endif()

# BLAS: loaded at run time (model/kernels/cpu/blas.h: oneDNN, else OpenBLAS with its core type set
# from the CPU's feature flags, which must happen before the library initialises). Nothing is
# linked; the OpenMP build of OpenBLAS is located here so that it, not the pthread build the
# system's default link may point at, is the one loaded.
find_file(STRATA_OPENBLAS_LIBRARY libopenblas.so.0
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
add_library(strata_blas INTERFACE)
target_link_libraries(strata_blas INTERFACE ${CMAKE_DL_LIBS})
if(STRATA_OPENBLAS_LIBRARY)
  target_compile_definitions(strata_blas INTERFACE
    STRATA_OPENBLAS_LIBRARY="${STRATA_OPENBLAS_LIBRARY}")
endif()
message(STATUS "OpenBLAS (OpenMP build, loaded at run time): ${STRATA_OPENBLAS_LIBRARY}")

add_library(strata_hdf5 INTERFACE)
target_link_libraries(strata_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
target_include_directories(strata_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS})

# CUDA: AUTO builds it when nvcc is found.
set(STRATA_HAVE_CUDA OFF)
if(NOT STRATA_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(STRATA_HAVE_CUDA ON)
  elseif(STRATA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "STRATA_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "CUDA backend: ${STRATA_HAVE_CUDA}")

if(STRATA_HAVE_CUDA)
  # H100 (sm_90a) unless the user chose: the backend is written for it, and CI compiles for it.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90a)
  endif()
  enable_language(CUDA)
  # CMake 3.25 knows no C++20 flag for nvcc (it arrived in 3.26); nvcc 13 with GCC 12 supports it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  find_package(CUDAToolkit REQUIRED)
  # NCCL, beside the toolkit (its CUDA 13 packaging) or in the system's paths: the GPU-to-GPU
  # collectives of multi-GPU runs (parallel/nccl_communicator.h).
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
    message(FATAL_ERROR "the CUDA backend needs NCCL (nccl.h and libnccl) and none was found; "
                        "install it or configure with -DSTRATA_CUDA=OFF")
  endif()
  add_library(strata_nccl_library INTERFACE)
  target_link_libraries(strata_nccl_library INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
  target_include_directories(strata_nccl_library SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
  message(STATUS "NCCL: ${NCCL_LIBRARY}")
  # nvcc's counterparts of the project's GCC warning options (those are kept to C and C++ in the
  # top-level CMakeLists.txt). Host code inside .cu files gets -Wall -Wextra but not -Wpedantic:
  # the host files nvcc generates carry GCC-style line markers ("# 1 "x.cu"") that -Wpedantic
  # rejects as "a GCC extension" on every line.
  add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>
                      $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror>)
  message(STATUS "CUDA architectures: ${CMAKE_CUDA_ARCHITECTURES}")
endif()

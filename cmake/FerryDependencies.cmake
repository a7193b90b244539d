# Finds ferry's dependencies and decides which build this is (GPU or CPU), saying why.
# Everything is found with find_package/find_path, so Debian packages and CMAKE_PREFIX_PATH
# (a pip torch, unpacked .deb files, a conda env) work the same way.

find_package(Threads REQUIRED)

# The CUDA toolkit is looked for first: a CUDA-enabled libtorch's own CMake config needs it too.
if(NOT FERRY_GPU STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
endif()

find_package(Torch REQUIRED)
find_package(TBB REQUIRED COMPONENTS tbb)
# ThreadSanitizer (the tsan preset) sees a hand-off between threads only where both sides are
# instrumented. oneTBB's scheduler, in Debian's libtbb, is not: every task a flow graph node spawns
# would be reported as a race in ferry's code. ferry's executables therefore load a libtbb built with
# TSan from the same source (scripts/build-tsan-tbb.sh), through their run path; they compile against
# the same headers. docs/reliability.md (Sanitizers) has the details.
if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=thread")
  set(FERRY_TSAN_TBB_DIR "${PROJECT_SOURCE_DIR}/build/tsan-tbb" CACHE PATH
      "Prefix of a libtbb built with ThreadSanitizer (lib/libtbb.so.12), for TSan builds; empty: none")
  if(FERRY_TSAN_TBB_DIR STREQUAL "")
    message(WARNING "ferry: ThreadSanitizer build with an uninstrumented libtbb (FERRY_TSAN_TBB_DIR is empty): "
                    "TSan will report oneTBB's task hand-offs as races in ferry's code")
  elseif(NOT EXISTS "${FERRY_TSAN_TBB_DIR}/lib/libtbb.so.12")
    message(FATAL_ERROR "ferry: a ThreadSanitizer build needs a libtbb built with TSan in ${FERRY_TSAN_TBB_DIR}/lib "
                        "(TSan cannot see the synchronisation inside Debian's): run scripts/build-tsan-tbb.sh first, "
                        "or set FERRY_TSAN_TBB_DIR to the prefix of one (empty: use the system's and expect false reports)")
  else()
    file(STRINGS "${FERRY_TSAN_TBB_DIR}/version" ferry_tsan_tbb_version LIMIT_COUNT 1)
    if(NOT ferry_tsan_tbb_version VERSION_EQUAL TBB_VERSION)
      message(FATAL_ERROR "ferry: the ThreadSanitizer libtbb in ${FERRY_TSAN_TBB_DIR} is oneTBB ${ferry_tsan_tbb_version}, "
                          "the headers are ${TBB_VERSION}: run scripts/build-tsan-tbb.sh again")
    endif()
    list(APPEND CMAKE_BUILD_RPATH "${FERRY_TSAN_TBB_DIR}/lib")
    message(STATUS "ferry: ThreadSanitizer build: executables load oneTBB ${ferry_tsan_tbb_version} built with TSan "
                   "from ${FERRY_TSAN_TBB_DIR}/lib")
  endif()
  # gcc 12's TSan runtime expects the address layout of at most 28 bits of mmap randomisation; with
  # more (vm.mmap_rnd_bits = 32 on some newer kernels) every test dies at start with "FATAL:
  # ThreadSanitizer: unexpected memory mapping". scripts/test-tsan.sh then runs ctest under setarch -R.
  if(EXISTS /proc/sys/vm/mmap_rnd_bits)
    file(STRINGS /proc/sys/vm/mmap_rnd_bits ferry_mmap_rnd_bits LIMIT_COUNT 1)
    if(ferry_mmap_rnd_bits GREATER 28)
      message(WARNING "ferry: vm.mmap_rnd_bits is ${ferry_mmap_rnd_bits} here: ThreadSanitizer programs need at most 28. "
                      "Run the tests with scripts/test-tsan.sh (it uses setarch -R), or as `setarch -R ctest --preset tsan`, "
                      "or lower it: sysctl vm.mmap_rnd_bits=28")
    endif()
  endif()
endif()
find_package(yaml-cpp REQUIRED)
find_package(PNG REQUIRED)  # libpng, for the "png" decoder (Debian: libpng-dev)
# simdjson, for the "jsonl" source (Debian: libsimdjson-dev).
find_package(simdjson REQUIRED CONFIG)
# Remote and compressed shards (io/remote/): libcurl for HTTP(S) and S3, zlib, liblzma (and libzstd, in
# ferryImportedTargets.cmake) to decompress them. Debian: libcurl4-openssl-dev, zlib1g-dev, liblzma-dev.
find_package(CURL REQUIRED)
find_package(ZLIB REQUIRED)
find_package(LibLZMA REQUIRED)
# libsentencepiece, for the "sentencepiece" decoder (Debian: libsentencepiece-dev). Optional: without it
# the decoder says so when a config names it. Only the module io/decoders/sentencepiece_module.cpp links it.
find_path(FERRY_SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h)
find_library(FERRY_SENTENCEPIECE_LIBRARY sentencepiece)
if(FERRY_SENTENCEPIECE_INCLUDE_DIR AND FERRY_SENTENCEPIECE_LIBRARY)
  message(STATUS "ferry: sentencepiece: ${FERRY_SENTENCEPIECE_LIBRARY}")
else()
  set(FERRY_SENTENCEPIECE_LIBRARY "")
  message(STATUS "ferry: sentencepiece: not found (Debian: libsentencepiece-dev): the sentencepiece decoder is left out")
endif()
if(FERRY_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(NOT PROJECT_IS_TOP_LEVEL)
  # Under add_subdirectory(ferry), the parent links ferry::ferry, whose usage names these imported
  # targets (torch, TBB::tbb, ... and what they name in turn): make them visible beyond this folder,
  # so that the parent need not find ferry's dependencies itself.
  get_directory_property(ferry_found_targets IMPORTED_TARGETS)
  foreach(target IN LISTS ferry_found_targets)
    get_target_property(global ${target} IMPORTED_GLOBAL)
    if(NOT global)
      set_target_properties(${target} PROPERTIES IMPORTED_GLOBAL TRUE)
    endif()
  endforeach()
endif()

# moodycamel::ConcurrentQueue is header-only. Debian installs it as concurrentqueue/*.h, upstream's
# CMake install as concurrentqueue/moodycamel/*.h; ferry includes <blockingconcurrentqueue.h>.
find_path(FERRY_CONCURRENTQUEUE_DIR
  NAMES blockingconcurrentqueue.h
  PATH_SUFFIXES concurrentqueue concurrentqueue/moodycamel include/concurrentqueue include/concurrentqueue/moodycamel)
if(NOT FERRY_CONCURRENTQUEUE_DIR)
  message(FATAL_ERROR "ferry: moodycamel concurrentqueue headers not found "
                      "(Debian: apt-get install libconcurrentqueue-dev, or put its prefix on CMAKE_PREFIX_PATH)")
endif()
# Only inside ferry's build (pipeline/bounded_queue.h is internal): never a consumer's dependency.
add_library(ferry_concurrentqueue INTERFACE)
target_include_directories(ferry_concurrentqueue SYSTEM INTERFACE "${FERRY_CONCURRENTQUEUE_DIR}")

# ferry::torch (libtorch), ferry::turbojpeg (libjpeg-turbo's TurboJPEG API, for the "jpeg" decoder)
# and ferry::webp (libwebp, for "webp"): made by the same file in the installed package, so both find
# them the same way.
include(${CMAKE_CURRENT_LIST_DIR}/ferryImportedTargets.cmake)
if(NOT TARGET ferry::turbojpeg)
  message(FATAL_ERROR "${FERRY_TURBOJPEG_NOT_FOUND_MESSAGE}")
endif()
if(NOT TARGET ferry::webp)
  message(FATAL_ERROR "${FERRY_WEBP_NOT_FOUND_MESSAGE}")
endif()
message(STATUS "ferry: TurboJPEG: ${FERRY_TURBOJPEG_LIBRARY}, libwebp: ${FERRY_WEBP_LIBRARY}")

# A CUDA-enabled libtorch defines torch_cuda (and CAFFE2_USE_CUDA); Debian's CPU-only one does not.
set(FERRY_TORCH_HAS_CUDA OFF)
if(TARGET torch_cuda OR CAFFE2_USE_CUDA OR TORCH_CUDA_LIBRARIES)
  set(FERRY_TORCH_HAS_CUDA ON)
endif()

set(FERRY_HAVE_CUDART 0)
set(FERRY_WITH_GPU 0)
if(FERRY_GPU STREQUAL "OFF")
  set(FERRY_BUILD_KIND "CPU")
  set(FERRY_BUILD_REASON "GPU support switched off (FERRY_GPU=OFF)")
elseif(NOT CUDAToolkit_FOUND)
  set(FERRY_BUILD_KIND "CPU")
  set(FERRY_BUILD_REASON "no CUDA toolkit found (put it on PATH or set CUDAToolkit_ROOT)")
else()
  set(FERRY_HAVE_CUDART 1)
  if(FERRY_TORCH_HAS_CUDA)
    set(FERRY_WITH_GPU 1)
    set(FERRY_BUILD_KIND "GPU")
    set(FERRY_BUILD_REASON "CUDA toolkit ${CUDAToolkit_VERSION} and libtorch ${Torch_VERSION} with CUDA")
  else()
    set(FERRY_BUILD_KIND "CPU")
    set(FERRY_BUILD_REASON "libtorch ${Torch_VERSION} has no CUDA (CUDA toolkit ${CUDAToolkit_VERSION} found: pinned memory, streams and events are compiled and fall back at run time)")
  endif()
endif()
if(FERRY_GPU STREQUAL "ON" AND NOT FERRY_WITH_GPU)
  message(FATAL_ERROR "ferry: FERRY_GPU=ON but this cannot be a GPU build: ${FERRY_BUILD_REASON}")
endif()
message(STATUS "ferry: ${FERRY_BUILD_KIND} build: ${FERRY_BUILD_REASON}")

# The dataset cache's gather kernel (pipeline/segment_copy_kernel.cu) needs a CUDA compiler; only a GPU
# build can use it. The kernel links the same shared cudart as the rest of ferry and libtorch: a
# second (static) runtime would not know their streams.
set(FERRY_SEGMENT_KERNEL 0)
if(NOT FERRY_WITH_GPU)
  set(FERRY_SEGMENT_KERNEL_REASON "this is a ${FERRY_BUILD_KIND} build (${FERRY_BUILD_REASON})")
else()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
      # Turing to Hopper as machine code (CUDA 13 has no Volta), Hopper's PTX for newer GPUs to
      # compile at load time.
      set(CMAKE_CUDA_ARCHITECTURES 75-real 80-real 90)
    endif()
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    if(CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.1)
      # A launch carries up to 24 KiB of pieces in its parameters, which CUDA allows from 12.1.
      set(FERRY_SEGMENT_KERNEL_REASON "the CUDA compiler is ${CMAKE_CUDA_COMPILER_VERSION}; the gather kernel needs 12.1 or newer")
    else()
      set(FERRY_SEGMENT_KERNEL 1)
      set(FERRY_SEGMENT_KERNEL_REASON "")
    endif()
  else()
    set(FERRY_SEGMENT_KERNEL_REASON "no CUDA compiler was found when ferry was configured (set CMAKE_CUDA_COMPILER to nvcc)")
  endif()
endif()
message(STATUS "ferry: dataset cache gather kernel: ${FERRY_SEGMENT_KERNEL} ${FERRY_SEGMENT_KERNEL_REASON}")

# JPEG decoding on the GPU (jpeg decoder's device: gpu | auto) uses nvJPEG, which the CUDA toolkit ships
# (CUDA::nvjpeg, found by FindCUDAToolkit) in most installs but not in every distribution's (Debian's has
# none), and ferry's kernels for the resize after it.
set(FERRY_NVJPEG 0)
if(NOT FERRY_SEGMENT_KERNEL)
  set(FERRY_NVJPEG_REASON "the GPU JPEG decoder needs ferry's CUDA kernels: ${FERRY_SEGMENT_KERNEL_REASON}")
elseif(NOT TARGET CUDA::nvjpeg)
  set(FERRY_NVJPEG_REASON "the CUDA toolkit ${CUDAToolkit_VERSION} (${CUDAToolkit_LIBRARY_DIR}) has no nvJPEG library")
else()
  set(FERRY_NVJPEG 1)
  set(FERRY_NVJPEG_REASON "")
endif()
message(STATUS "ferry: GPU JPEG decoder (nvJPEG): ${FERRY_NVJPEG} ${FERRY_NVJPEG_REASON}")

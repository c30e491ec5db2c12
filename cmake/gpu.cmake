# Picks this build's GPU backend and sets up its compiler. One build directory has at most one backend
# (CHORUS_GPU_BACKEND: cuda, hip or none), because the CUDA and HIP builds are different products
# (libnccl.so.2 against the CUDA runtime; librccl.so.1 against the HIP runtime).
#
#   CHORUS_CUDA / CHORUS_HIP  AUTO: on when the toolchain is found; ON: required; OFF: never.
#   An explicit ON beats AUTO; two AUTOs that both find a toolchain give CUDA; ON with ON is an error.
#
# Sets: CHORUS_GPU_BACKEND, and for the GPU builds CHORUS_CUDA_ARCHS / CHORUS_HIP_ARCHS and CHORUS_HIPCC.

set(CHORUS_CUDA_ARCHS "80;90" CACHE STRING "CUDA architectures of the device code (CMAKE_CUDA_ARCHITECTURES)")
set(CHORUS_HIP_ARCHS "gfx90a;gfx940" CACHE STRING "AMD GPU targets of the device code (--offload-arch)")

if(CHORUS_CUDA STREQUAL "ON" AND CHORUS_HIP STREQUAL "ON")
  message(FATAL_ERROR "CHORUS_CUDA=ON and CHORUS_HIP=ON: a build has at most one GPU backend; "
    "configure the CUDA and HIP builds in separate build directories")
endif()

# Toolchain discovery (cheap: no test compile until the backend is chosen).
set(_chorus_have_cuda FALSE)
if(NOT CHORUS_CUDA STREQUAL "OFF")
  if(CMAKE_CUDA_COMPILER)
    set(_chorus_have_cuda TRUE)
  else()
    find_program(CHORUS_NVCC nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH PATHS /usr/local/cuda PATH_SUFFIXES bin)
    if(CHORUS_NVCC)
      set(_chorus_have_cuda TRUE)
    endif()
  endif()
endif()
set(_chorus_have_hip FALSE)
if(NOT CHORUS_HIP STREQUAL "OFF")
  find_program(CHORUS_HIPCC hipcc HINTS ENV ROCM_PATH PATHS /opt/rocm PATH_SUFFIXES bin)
  find_package(hip CONFIG QUIET)
  if(CHORUS_HIPCC AND hip_FOUND)
    set(_chorus_have_hip TRUE)
  endif()
endif()

if(CHORUS_CUDA STREQUAL "ON" AND NOT _chorus_have_cuda)
  message(FATAL_ERROR "CHORUS_CUDA=ON but nvcc was not found (set CMAKE_CUDA_COMPILER or CUDA_HOME)")
endif()
if(CHORUS_HIP STREQUAL "ON" AND NOT _chorus_have_hip)
  message(FATAL_ERROR "CHORUS_HIP=ON but hipcc and the hip CMake package were not both found "
    "(Debian: apt-get install hipcc libamdhip64-dev; ROCm: set ROCM_PATH)")
endif()

if(CHORUS_HIP STREQUAL "ON")
  set(CHORUS_GPU_BACKEND hip)
elseif(CHORUS_CUDA STREQUAL "ON" OR _chorus_have_cuda)
  set(CHORUS_GPU_BACKEND cuda)
elseif(_chorus_have_hip)
  set(CHORUS_GPU_BACKEND hip)
else()
  set(CHORUS_GPU_BACKEND none)
endif()

if(CHORUS_GPU_BACKEND STREQUAL "cuda")
  if(NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER ${CHORUS_NVCC})
  endif()
  # Must be set before enable_language, or CMake probes the compiler's default architecture.
  set(CMAKE_CUDA_ARCHITECTURES ${CHORUS_CUDA_ARCHS})
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  # CUDA 12.1+ passes kernel arguments up to 32 KB to sm_70 and newer: the launch descriptor (kernels/device_work.h)
  # then holds 16 channels. Every target of the build gets the definition, so host code and kernel agree on it.
  set(_chorus_large_args ON)
  if(CUDAToolkit_VERSION VERSION_LESS 12.1)
    set(_chorus_large_args OFF)
  endif()
  foreach(_arch IN LISTS CHORUS_CUDA_ARCHS)
    string(REGEX REPLACE "[^0-9]" "" _num "${_arch}")
    if(_num STREQUAL "" OR _num LESS 70)  # "native", "all": not known to be sm_70 or newer
      set(_chorus_large_args OFF)
    endif()
  endforeach()
  if(_chorus_large_args)
    add_compile_definitions(CHORUS_DEVWORK_LARGE=1)
  endif()
  message(STATUS "chorus: GPU backend CUDA ${CUDAToolkit_VERSION} (${CMAKE_CUDA_COMPILER}), "
    "architectures ${CHORUS_CUDA_ARCHS}, large kernel arguments ${_chorus_large_args}; builds libnccl.so.2")
elseif(CHORUS_GPU_BACKEND STREQUAL "hip")
  # The kernel is compiled by a custom command running hipcc, not by enable_language(HIP): CMake 3.25 requires
  # <rocm root>/lib/cmake/hip-lang/hip-lang-config.cmake, and Debian's HIP packages install that file under
  # /usr/lib/x86_64-linux-gnu/cmake/hip-lang, so enable_language(HIP) fails ("does not contain the HIP runtime
  # CMake package"). The host-side runtime code is plain C++ against the hip::host target, which does work.
  message(STATUS "chorus: GPU backend HIP ${hip_VERSION} (${CHORUS_HIPCC}), targets ${CHORUS_HIP_ARCHS}; "
    "builds librccl.so.1 (and libnccl.so.2)")
else()
  message(STATUS "chorus: no GPU backend (CHORUS_CUDA=${CHORUS_CUDA}, CHORUS_HIP=${CHORUS_HIP}): host path only")
endif()

# Components of libchorus. Each folder's sources are globbed so that adding a file needs no
# CMake edit; the dependency direction is api -> core -> {algo, engine, topo} -> runtime/transports -> util.

# Host topology (src/topo/topology_hwloc.cc, docs/topology.md): hwloc 2.x (2.1 or later) through pkg-config. AUTO
# builds without it where it is missing (the GPU machines have no Debian packages): probing and topology files then
# say so and communicators start with an empty view. ON requires it.
set(CHORUS_HWLOC AUTO CACHE STRING "hwloc for the host topology (AUTO/ON/OFF)")
if(NOT CHORUS_HWLOC MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "CHORUS_HWLOC must be AUTO, ON or OFF (got '${CHORUS_HWLOC}')")
endif()
set(CHORUS_HAVE_HWLOC FALSE)
if(NOT CHORUS_HWLOC STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(HWLOC QUIET IMPORTED_TARGET hwloc>=2.1)
  endif()
  # hwloc 3 changed the object structures chorus reads; it is not supported yet.
  if(HWLOC_FOUND AND HWLOC_VERSION VERSION_LESS 3)
    set(CHORUS_HAVE_HWLOC TRUE)
  elseif(CHORUS_HWLOC STREQUAL "ON")
    message(FATAL_ERROR "CHORUS_HWLOC=ON but hwloc 2.x (2.1 or later) was not found through pkg-config "
      "(Debian: apt-get install libhwloc-dev)")
  endif()
endif()
if(CHORUS_HAVE_HWLOC)
  message(STATUS "chorus: host topology through hwloc ${HWLOC_VERSION}")
elseif(CHORUS_HWLOC STREQUAL "OFF")
  message(STATUS "chorus: CHORUS_HWLOC=OFF: host topology probing and topology files disabled")
else()
  message(STATUS "chorus: no hwloc 2.x found: host topology probing and topology files disabled")
endif()

# Nets between hosts (transports/net/net.h, docs/net.md): UCX (libucx-dev) and InfiniBand verbs (libibverbs-dev)
# through pkg-config, like hwloc: AUTO builds each where its library is found, ON requires it, OFF leaves it out. A
# net that is left out answers NCCL_NET=UCX / IB with an error that says so.
find_package(PkgConfig QUIET)
foreach(net UCX VERBS)
  set(CHORUS_HAVE_${net} FALSE)
endforeach()
if(PKG_CONFIG_FOUND AND NOT CHORUS_UCX STREQUAL "OFF")
  pkg_check_modules(UCX QUIET IMPORTED_TARGET ucx)
  if(UCX_FOUND)
    set(CHORUS_HAVE_UCX TRUE)
  endif()
endif()
if(PKG_CONFIG_FOUND AND NOT CHORUS_VERBS STREQUAL "OFF")
  pkg_check_modules(VERBS QUIET IMPORTED_TARGET libibverbs)
  if(VERBS_FOUND)
    set(CHORUS_HAVE_VERBS TRUE)
  endif()
endif()
foreach(net UCX VERBS)
  if(CHORUS_${net} STREQUAL "ON" AND NOT CHORUS_HAVE_${net})
    message(FATAL_ERROR "CHORUS_${net}=ON but its library was not found through pkg-config "
      "(Debian: apt-get install libucx-dev / libibverbs-dev)")
  endif()
endforeach()
message(STATUS "chorus: nets Socket, UCX ${CHORUS_HAVE_UCX}, IB verbs ${CHORUS_HAVE_VERBS}")

# Schedules: plain data, no dependencies.
file(GLOB CHORUS_ALGO_SRCS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/algo/*.cc)
add_library(chorus_algo STATIC ${CHORUS_ALGO_SRCS})
target_include_directories(chorus_algo PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)

# Host build of the single-source device code (reductions, executor).
file(GLOB CHORUS_KERNEL_SRCS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/*.cc)
add_library(chorus_kernels STATIC ${CHORUS_KERNEL_SRCS})
target_include_directories(chorus_kernels PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include
  ${PROJECT_SOURCE_DIR}/src)
target_compile_options(chorus_kernels PRIVATE -O3 -ffp-contract=off)

# Everything else: api, core, engine, topo, runtime, transports.
file(GLOB CHORUS_CORE_SRCS CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/src/api/*.cc
  ${PROJECT_SOURCE_DIR}/src/core/*.cc
  ${PROJECT_SOURCE_DIR}/src/engine/*.cc
  ${PROJECT_SOURCE_DIR}/src/topo/*.cc
  ${PROJECT_SOURCE_DIR}/src/runtime/*.cc
  ${PROJECT_SOURCE_DIR}/transports/shm/*.cc
  ${PROJECT_SOURCE_DIR}/transports/socket/*.cc
  ${PROJECT_SOURCE_DIR}/transports/*.cc
  ${PROJECT_SOURCE_DIR}/transports/net/*.cc
  ${PROJECT_SOURCE_DIR}/transports/ucx/*.cc
  ${PROJECT_SOURCE_DIR}/transports/ib/*.cc)
add_library(chorus_objs OBJECT ${CHORUS_CORE_SRCS})
target_include_directories(chorus_objs PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
  ${PROJECT_SOURCE_DIR})
target_compile_definitions(chorus_objs PUBLIC CHORUS_VERSION_STRING="${PROJECT_VERSION}")
target_compile_options(chorus_objs PRIVATE -fvisibility=hidden)

set(CHORUS_LINK_LIBS chorus_algo chorus_kernels Threads::Threads ${CMAKE_DL_LIBS} rt)
if(CHORUS_HAVE_HWLOC)
  target_compile_definitions(chorus_objs PRIVATE CHORUS_HAVE_HWLOC=1)
  target_link_libraries(chorus_objs PRIVATE PkgConfig::HWLOC)
  list(APPEND CHORUS_LINK_LIBS PkgConfig::HWLOC)
endif()

# UCX is linked; libibverbs is opened at run time (dlopen), as NCCL does, so that libnccl.so.2 loads on hosts without
# it: only its headers are needed to build.
if(CHORUS_HAVE_UCX)
  target_compile_definitions(chorus_objs PRIVATE CHORUS_HAVE_UCX=1)
  target_link_libraries(chorus_objs PRIVATE PkgConfig::UCX)
  list(APPEND CHORUS_LINK_LIBS PkgConfig::UCX)
endif()
if(CHORUS_HAVE_VERBS)
  target_compile_definitions(chorus_objs PRIVATE CHORUS_HAVE_VERBS=1)
  target_include_directories(chorus_objs PRIVATE ${VERBS_INCLUDE_DIRS})
endif()

# The GPU backend (cmake/gpu.cmake chose it): GpuRuntime (src/runtime/gpu/gpu_runtime.cc, one source for CUDA and
# HIP through src/runtime/{cuda,hip}/api.h) and the collective kernel (kernels/device_kernel.cu). A host build gets
# src/runtime/none/builtin_none.cc instead, whose makeBuiltinGpuRuntime() returns null.
set(CHORUS_GPU_INCLUDES ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
if(CHORUS_GPU_BACKEND STREQUAL "cuda")
  add_library(chorus_gpu OBJECT ${PROJECT_SOURCE_DIR}/src/runtime/gpu/gpu_runtime.cc
    ${PROJECT_SOURCE_DIR}/kernels/device_kernel.cu)
  target_link_libraries(chorus_gpu PRIVATE CUDA::toolkit)
  target_compile_definitions(chorus_gpu PRIVATE CHORUS_HAVE_CUDA=1)
  # -fmad=false: no fused multiply-add, so device reductions round exactly as the host path's (-ffp-contract=off).
  target_compile_options(chorus_gpu PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-O3 -fmad=false --expt-relaxed-constexpr -Xcompiler=-fvisibility=hidden>
    $<$<COMPILE_LANGUAGE:CXX>:-fvisibility=hidden>)
  # Static CUDA runtime: libnccl.so.2 needs no libcudart soname, only the driver (libcuda.so.1, dlopened by cudart).
  list(APPEND CHORUS_LINK_LIBS CUDA::cudart_static)
elseif(CHORUS_GPU_BACKEND STREQUAL "hip")
  # hipcc through a custom command (cmake/gpu.cmake says why not enable_language(HIP)). -include hip_runtime.h
  # gives hipcc what nvcc gets implicitly (cuda_runtime.h), so the kernel sources include no runtime header.
  set(_src ${PROJECT_SOURCE_DIR}/kernels/device_kernel.cu)
  set(_obj ${PROJECT_BINARY_DIR}/CMakeFiles/device_kernel.hip.o)
  set(_flags -x hip -std=c++17 -O3 -fPIC -fvisibility=hidden -ffp-contract=off -include hip/hip_runtime.h
    -DCHORUS_HAVE_HIP=1)
  foreach(_arch ${CHORUS_HIP_ARCHS})
    list(APPEND _flags --offload-arch=${_arch})
  endforeach()
  foreach(_dir ${CHORUS_GPU_INCLUDES})
    list(APPEND _flags -I${_dir})
  endforeach()
  add_custom_command(OUTPUT ${_obj}
    COMMAND ${CHORUS_HIPCC} ${_flags} -MD -MF ${_obj}.d -c ${_src} -o ${_obj}
    DEPENDS ${_src} DEPFILE ${_obj}.d VERBATIM
    COMMENT "Building HIP object kernels/device_kernel.cu (${CHORUS_HIP_ARCHS})")
  # One archive holding the kernel object, so that every library below links the same object without running
  # the custom command once per target.
  add_library(chorus_hip_kernel STATIC ${_obj})
  set_target_properties(chorus_hip_kernel PROPERTIES LINKER_LANGUAGE CXX)
  add_library(chorus_gpu OBJECT ${PROJECT_SOURCE_DIR}/src/runtime/gpu/gpu_runtime.cc)
  target_link_libraries(chorus_gpu PRIVATE hip::host)
  target_compile_definitions(chorus_gpu PRIVATE CHORUS_HAVE_HIP=1)
  target_compile_options(chorus_gpu PRIVATE -fvisibility=hidden)
  list(APPEND CHORUS_LINK_LIBS chorus_hip_kernel hip::host)
else()
  add_library(chorus_gpu OBJECT ${PROJECT_SOURCE_DIR}/src/runtime/none/builtin_none.cc)
  target_compile_options(chorus_gpu PRIVATE -fvisibility=hidden)
endif()
target_include_directories(chorus_gpu PRIVATE ${CHORUS_GPU_INCLUDES})
if(CHORUS_GPU_BACKEND STREQUAL "cuda")
  target_compile_definitions(chorus_objs PUBLIC CHORUS_HAVE_CUDA=1)
elseif(CHORUS_GPU_BACKEND STREQUAL "hip")
  target_compile_definitions(chorus_objs PUBLIC CHORUS_HAVE_HIP=1)
endif()
set(CHORUS_ALL_OBJS $<TARGET_OBJECTS:chorus_objs> $<TARGET_OBJECTS:chorus_gpu>)

# Static archive of the same objects, for white-box tests of internals.
add_library(chorus_static STATIC ${CHORUS_ALL_OBJS})
target_include_directories(chorus_static PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
  ${PROJECT_SOURCE_DIR})
target_link_libraries(chorus_static PUBLIC ${CHORUS_LINK_LIBS})

# The product: libnccl.so.2 exporting exactly the NCCL API (version script).
add_library(nccl SHARED ${CHORUS_ALL_OBJS})
set_target_properties(nccl PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION 2
  LINK_DEPENDS ${PROJECT_SOURCE_DIR}/src/api/libnccl.map)
target_include_directories(nccl PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(nccl PRIVATE ${CHORUS_LINK_LIBS})
target_link_options(nccl PRIVATE -Wl,--version-script=${PROJECT_SOURCE_DIR}/src/api/libnccl.map -Wl,--no-undefined)

# HIP builds: librccl.so.1, RCCL's library name, exporting the NCCL API plus RCCL's additions (include/rccl.h).
# libnccl.so.2 is built from the same objects too, for the test suites and for programs linked against NCCL.
if(CHORUS_GPU_BACKEND STREQUAL "hip")
  add_library(rccl SHARED ${CHORUS_ALL_OBJS})
  set_target_properties(rccl PROPERTIES VERSION 1.0 SOVERSION 1 LINK_DEPENDS ${PROJECT_SOURCE_DIR}/src/api/librccl.map)
  target_include_directories(rccl PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(rccl PRIVATE ${CHORUS_LINK_LIBS})
  target_link_options(rccl PRIVATE -Wl,--version-script=${PROJECT_SOURCE_DIR}/src/api/librccl.map -Wl,--no-undefined)
endif()

include(cmake/install.cmake)

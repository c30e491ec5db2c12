# Components of libchorus. Each folder's sources are globbed so that adding a file needs no
# CMake edit; the dependency direction is api -> core -> {algo, engine, topo} -> runtime/transports -> util.

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
  ${PROJECT_SOURCE_DIR}/transports/socket/*.cc)
add_library(chorus_objs OBJECT ${CHORUS_CORE_SRCS})
target_include_directories(chorus_objs PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
  ${PROJECT_SOURCE_DIR})
target_compile_definitions(chorus_objs PUBLIC CHORUS_VERSION_STRING="${PROJECT_VERSION}")
target_compile_options(chorus_objs PRIVATE -fvisibility=hidden)

set(CHORUS_LINK_LIBS chorus_algo chorus_kernels Threads::Threads ${CMAKE_DL_LIBS} rt)

# Static archive of the same objects, for white-box tests of internals.
add_library(chorus_static STATIC $<TARGET_OBJECTS:chorus_objs>)
target_include_directories(chorus_static PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
  ${PROJECT_SOURCE_DIR})
target_link_libraries(chorus_static PUBLIC ${CHORUS_LINK_LIBS})

# The product: libnccl.so.2 exporting exactly the NCCL API (version script).
add_library(nccl SHARED $<TARGET_OBJECTS:chorus_objs>)
set_target_properties(nccl PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION 2
  LINK_DEPENDS ${PROJECT_SOURCE_DIR}/src/api/libnccl.map)
target_include_directories(nccl PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(nccl PRIVATE ${CHORUS_LINK_LIBS})
target_link_options(nccl PRIVATE -Wl,--version-script=${PROJECT_SOURCE_DIR}/src/api/libnccl.map -Wl,--no-undefined)

include(cmake/install.cmake)

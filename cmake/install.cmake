# Install rules: the library with its SONAME links, the public headers, a pkg-config file
# and a CMake package so that users can `find_package(chorus)` and link `chorus::nccl`.
include(CMakePackageConfigHelpers)

install(TARGETS nccl EXPORT chorusTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/nccl.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# HIP builds: librccl.so.1 (chorus::rccl) and rccl.h where RCCL puts it (<rccl/rccl.h>) and where older RCCL
# releases put it (<rccl.h>).
if(TARGET rccl)
  install(TARGETS rccl EXPORT chorusTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(FILES ${PROJECT_SOURCE_DIR}/include/rccl.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  # nccl.h next to it too, so that -I<prefix>/include/rccl with #include <rccl.h> also works.
  install(FILES ${PROJECT_SOURCE_DIR}/include/rccl.h ${PROJECT_SOURCE_DIR}/include/nccl.h
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rccl)
endif()
install(EXPORT chorusTargets NAMESPACE chorus:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)

file(WRITE ${PROJECT_BINARY_DIR}/chorusConfig.cmake.in
  "@PACKAGE_INIT@\ninclude(\"\${CMAKE_CURRENT_LIST_DIR}/chorusTargets.cmake\")\n")
configure_package_config_file(${PROJECT_BINARY_DIR}/chorusConfig.cmake.in ${PROJECT_BINARY_DIR}/chorusConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/chorusConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/chorusConfig.cmake ${PROJECT_BINARY_DIR}/chorusConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)

set(CHORUS_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
set(CHORUS_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
# Relocatable: the prefix is found from the .pc file's own location.
file(RELATIVE_PATH CHORUS_PC_UP /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
file(WRITE ${PROJECT_BINARY_DIR}/nccl.pc
  "prefix=\${pcfiledir}/${CHORUS_PC_UP}\nlibdir=${CHORUS_PC_LIBDIR}\nincludedir=${CHORUS_PC_INCLUDEDIR}\n\n"
  "Name: nccl\nDescription: chorus, NCCL-compatible collective communication\nVersion: ${PROJECT_VERSION}\n"
  "Libs: -L\${libdir} -lnccl\nCflags: -I\${includedir}\n")
install(FILES ${PROJECT_BINARY_DIR}/nccl.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
configure_file(${PROJECT_BINARY_DIR}/nccl.pc ${PROJECT_BINARY_DIR}/chorus.pc COPYONLY)
install(FILES ${PROJECT_BINARY_DIR}/chorus.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

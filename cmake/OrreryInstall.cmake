# `cmake --install`: the `orrery` command (bin/), its helper programs (libexec/orrery/, where
# base::find_helper looks), and the modules as a CMake package: static libraries, their public
# headers (include/orrery/<module>/, the generated protobuf headers in include/orrery/pb/) and
# orreryConfig.cmake, so that `find_package(orrery)` gives one target per module (orrery::base,
# orrery::traces, ..., orrery::sim, orrery::planner). The executor is not part of the package: it
# needs libtorch, whose CMake package Debian does not ship for consumers (docs/executor.md).
# Component `library`: the package alone (tests/install/ installs only it).
include(CMakePackageConfigHelpers)

set(orrery_package_modules
  base traces models topologies plan sim_costs sim_analytic)
if(ORRERY_SIMULATOR)
  list(APPEND orrery_package_modules sim_des sim sim_goodput calibration validation planner)
endif()

set(orrery_package_targets "")
foreach(module IN LISTS orrery_package_modules)
  set(target orrery_${module})
  # In the build tree a module's headers are its source folder's include/; installed, they are
  # all under one include/.
  get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  set(wrapped "")
  foreach(dir IN LISTS dirs)
    list(APPEND wrapped "$<BUILD_INTERFACE:${dir}>")
  endforeach()
  list(APPEND wrapped "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
  # Position-independent (-fPIC, not Debian's default -fPIE): the Python module (python/) and
  # a user's shared library can link them.
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${wrapped}"
                                             EXPORT_NAME ${module} POSITION_INDEPENDENT_CODE ON)
  list(APPEND orrery_package_targets ${target})
endforeach()

# The cluster presets are compiled apart (topologies/CMakeLists.txt) into orrery_topologies.
set_property(TARGET orrery_topologies_cluster_presets PROPERTY POSITION_INDEPENDENT_CODE ON)

install(TARGETS ${orrery_package_targets} EXPORT orreryTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library)
set(header_dirs base traces models topologies plan sim/costs sim/engines/analytic)
if(ORRERY_SIMULATOR)
  list(APPEND header_dirs sim/engines/des sim sim/goodput calibration validation planner)
endif()
foreach(dir IN LISTS header_dirs)
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/include)
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
      COMPONENT library FILES_MATCHING PATTERN "*.hpp")
  endif()
endforeach()
install(DIRECTORY ${PROJECT_BINARY_DIR}/traces/gen/orrery/pb/
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/orrery/pb COMPONENT library FILES_MATCHING PATTERN "*.pb.h")

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/orrery)
install(EXPORT orreryTargets NAMESPACE orrery:: DESTINATION ${config_dir} COMPONENT library)
# Where an installed program looks for orrery-des and orrery-run: the prefix installed to (known
# only now: `cmake --install --prefix` may differ from the configured one), written into a source
# the package config compiles into the user's program (base/CMakeLists.txt says why).
install(CODE "set(ORRERY_INSTALLED_HELPER_DIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBEXECDIR}/orrery\")
  configure_file(\"${PROJECT_SOURCE_DIR}/cmake/helper_dirs_installed.cpp.in\"
                 \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${config_dir}/helper_dirs.cpp\" @ONLY)"
  COMPONENT library)
set(ORRERY_PACKAGE_HAS_SIMULATOR ${ORRERY_SIMULATOR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/orreryConfig.cmake.in
  ${PROJECT_BINARY_DIR}/orreryConfig.cmake INSTALL_DESTINATION ${config_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/orreryConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/orreryConfig.cmake ${PROJECT_BINARY_DIR}/orreryConfigVersion.cmake
  DESTINATION ${config_dir} COMPONENT library)

# The programs.
install(TARGETS orrery RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT programs)
foreach(helper orrery-des orrery-run)
  if(TARGET ${helper})
    install(TARGETS ${helper} RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/orrery
      COMPONENT programs)
  endif()
endforeach()

# cmake/WakuwakuPackage.cmake — what `cmake --install` installs for users:
# a relocatable CMake package and two pkg-config files.
#
#   <prefix>/lib/cmake/wakuwaku/  wakuwakuConfig.cmake, …ConfigVersion.cmake,
#                                 wakuwakuTargets*.cmake (the export set),
#                                 WakuwakuGenerate.cmake
#   <prefix>/lib/pkgconfig/       wakuwaku.pc (shared), wakuwaku-static.pc,
#                                 wakuwaku-codec.pc (generated records' codec)
#
# (lib is CMAKE_INSTALL_LIBDIR.) Every path in them is relative to the file
# itself, so the prefix is the one given to `cmake --install --prefix`, and
# an installed tree still works after it was moved.
#
#   wk_package_export(<target>... [COMPONENT <component>]
#                     [PKG_MODULES <VAR>=<module>...])
#
# installs the targets into the export set (find_package users get
# wakuwaku::<target>) and records the pkg-config modules their link
# interface names as PkgConfig::<VAR>, which the installed config file
# looks up again before loading the targets. A second library is one line,
# as codec/CMakeLists.txt does:
#
#   wk_package_export(wakuwaku_codec wakuwaku_codec_static COMPONENT codec
#                     PKG_MODULES JANSSON=jansson)
#
# Install components (cmake --install --component; one Debian package
# each, cmake/WakuwakuDeb.cmake): a shared library's versioned files go to
# COMPONENT (default lib), its .so link, static archives, executables
# (wk-codegen), headers, the CMake package and the .pc files to dev.
#
#   wk_package_install()
#
# writes and installs the package; call it once, after the last export.
include_guard(GLOBAL)
include(CMakePackageConfigHelpers)

set(WK_PACKAGE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/wakuwaku)

function(wk_package_export)
  cmake_parse_arguments(WKP "" "COMPONENT" "PKG_MODULES" ${ARGN})
  if(NOT WKP_COMPONENT)
    set(WKP_COMPONENT lib)
  endif()
  install(TARGETS ${WKP_UNPARSED_ARGUMENTS} EXPORT wakuwakuTargets
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT dev
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ${WKP_COMPONENT}
                  NAMELINK_COMPONENT dev
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  set_property(GLOBAL APPEND PROPERTY WK_PACKAGE_PKG_MODULES ${WKP_PKG_MODULES})
endfunction()

function(wk_package_install)
  get_property(modules GLOBAL PROPERTY WK_PACKAGE_PKG_MODULES)
  list(REMOVE_DUPLICATES modules)
  set(WK_PACKAGE_PKG_MODULES "${modules}")
  install(EXPORT wakuwakuTargets NAMESPACE wakuwaku:: DESTINATION ${WK_PACKAGE_CMAKE_DIR}
          COMPONENT dev)
  configure_package_config_file(
    ${PROJECT_SOURCE_DIR}/cmake/wakuwakuConfig.cmake.in
    ${PROJECT_BINARY_DIR}/wakuwakuConfig.cmake
    INSTALL_DESTINATION ${WK_PACKAGE_CMAKE_DIR})
  # 0.x: a minor version may break the API, so only the same minor matches.
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/wakuwakuConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/wakuwakuConfig.cmake
                ${PROJECT_BINARY_DIR}/wakuwakuConfigVersion.cmake
                ${PROJECT_SOURCE_DIR}/cmake/WakuwakuGenerate.cmake
          DESTINATION ${WK_PACKAGE_CMAKE_DIR} COMPONENT dev)

  # pkg-config: the prefix is found from the .pc file's own directory.
  set(pcdir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  if(IS_ABSOLUTE "${pcdir}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(WK_PC_PREFIX "${CMAKE_INSTALL_PREFIX}") # absolute dirs: not relocatable
  else()
    file(RELATIVE_PATH rel "/root/${pcdir}" "/root")
    string(REGEX REPLACE "/$" "" rel "${rel}")
    set(WK_PC_PREFIX "\${pcfiledir}/${rel}")
  endif()
  foreach(pc wakuwaku wakuwaku-static wakuwaku-codec)
    configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
    install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${pcdir} COMPONENT dev)
  endforeach()
endfunction()

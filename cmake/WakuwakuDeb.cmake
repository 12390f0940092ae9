# cmake/WakuwakuDeb.cmake — the license, the manual pages and the Debian
# packages (`cpack -G DEB`, run by scripts/package.sh; docs/packaging.md).
#
# Every installed file belongs to one install component, and each
# component is one Debian package:
#
#   lib    libwakuwaku0        libwakuwaku.so.0 and its versioned file
#   codec  libwakuwaku-codec0  libwakuwaku_codec.so.0 (generated records' JSON)
#   dev    libwakuwaku-dev     headers, the .so links, the static archives,
#                              the CMake package, the .pc files, wk-codegen
#                              and wk-codegen(1)
#   tools  wakuwaku-tools      wk and wk(1)
#
# (0 is the soname's major: PROJECT_VERSION_MAJOR.) A plain `cmake
# --install` puts LICENSE in share/doc/wakuwaku/ and the manual pages in
# share/man/man1/ as they are. With WK_DEB=ON (scripts/package.sh), the
# Debian layout instead: each package's share/doc/<package>/copyright (the
# license in Debian's machine-readable format) and changelog.Debian.gz,
# and the manual pages gzipped.
#
#   wk_install_man(<page> <component>)   a manual page, share/man/man1
#   wk_deb_install()                     the license files; for the top-level
#                                        project, CPack's DEB settings (last)
include_guard(GLOBAL)

option(WK_DEB "Install in the Debian packages' layout (scripts/package.sh sets it)" OFF)
# A placeholder address (.invalid: RFC 2606) until the project has one.
set(WK_DEB_MAINTAINER "the wakuwaku authors <maintainer@wakuwaku.invalid>"
    CACHE STRING "The Maintainer of the Debian packages")
set(WK_DEB_RELEASE 1 CACHE STRING "The Debian revision of the packages (0.2.0-<this>)")

set(WK_DEB_SOVERSION ${PROJECT_VERSION_MAJOR})
set(WK_DEB_NAME_lib libwakuwaku${WK_DEB_SOVERSION})
set(WK_DEB_NAME_codec libwakuwaku-codec${WK_DEB_SOVERSION})
set(WK_DEB_NAME_dev libwakuwaku-dev)
set(WK_DEB_NAME_tools wakuwaku-tools)
set(WK_DEB_COMPONENTS lib codec dev tools)
set(WK_DEB_DIR ${PROJECT_BINARY_DIR}/deb)

# Gzipped with -n (no name, no time stamp): the same bytes on every build.
function(wk_deb_gzip in out)
  execute_process(COMMAND gzip -9n -c ${in} OUTPUT_FILE ${out} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "gzip -9n ${in} failed")
  endif()
endfunction()

function(wk_install_man page component)
  get_filename_component(name ${page} NAME)
  if(WK_DEB)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${page})
    file(MAKE_DIRECTORY ${WK_DEB_DIR}/man)
    wk_deb_gzip(${page} ${WK_DEB_DIR}/man/${name}.gz)
    set(page ${WK_DEB_DIR}/man/${name}.gz)
  endif()
  install(FILES ${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT ${component})
endfunction()

function(wk_deb_install)
  set(license ${PROJECT_SOURCE_DIR}/LICENSE)
  if(NOT WK_DEB)
    install(FILES ${license} DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT dev)
  else()
    # copyright: LICENSE's notice and text as a machine-readable stanza
    # (Debian names the MIT license "Expat").
    file(READ ${license} content)
    string(FIND "${content}" "Permission" at)
    if(NOT content MATCHES "Copyright \\(c\\) ([^\n]*)" OR at LESS 0)
      message(FATAL_ERROR "LICENSE: no \"Copyright (c)\" line or no \"Permission\" paragraph")
    endif()
    set(notice "${CMAKE_MATCH_1}")
    string(SUBSTRING "${content}" ${at} -1 text)
    string(STRIP "${text}" text)
    string(REPLACE "\n\n" "\n.\n" text "${text}") # an empty line is " ."
    string(REPLACE "\n" "\n " text " ${text}")
    set(WK_DEB_COPYRIGHT
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        "Upstream-Name: ${PROJECT_NAME}\n"
        "Upstream-Contact: ${WK_DEB_MAINTAINER}\n\n"
        "Files: *\n"
        "Copyright: ${notice}\n"
        "License: Expat\n"
        "${text}\n")
    string(CONCAT WK_DEB_COPYRIGHT ${WK_DEB_COPYRIGHT})
    file(WRITE ${WK_DEB_DIR}/copyright "${WK_DEB_COPYRIGHT}")
    # changelog.Debian: one entry; the date honours SOURCE_DATE_EPOCH
    # (scripts/package.sh: the last commit's), so a rebuild is identical.
    string(TIMESTAMP date "%a, %d %b %Y %H:%M:%S +0000" UTC)
    file(WRITE ${WK_DEB_DIR}/changelog.Debian
         "${PROJECT_NAME} (${PROJECT_VERSION}-${WK_DEB_RELEASE}) unstable; urgency=medium\n\n"
         "  * Built from the wakuwaku source tree by scripts/package.sh; the\n"
         "    changes of each version are in the source's CHANGES.md.\n\n"
         " -- ${WK_DEB_MAINTAINER}  ${date}\n")
    wk_deb_gzip(${WK_DEB_DIR}/changelog.Debian ${WK_DEB_DIR}/changelog.Debian.gz)
    foreach(c IN LISTS WK_DEB_COMPONENTS)
      install(FILES ${WK_DEB_DIR}/copyright ${WK_DEB_DIR}/changelog.Debian.gz
              DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${WK_DEB_NAME_${c}} COMPONENT ${c})
    endforeach()
    # Stripped as dh_strip does (CPACK_STRIP_FILES would keep .comment and
    # leave the static archives' debug information).
    set(lib ${CMAKE_INSTALL_LIBDIR})
    foreach(f lib:--strip-unneeded:${lib}/libwakuwaku.so.${PROJECT_VERSION}
              codec:--strip-unneeded:${lib}/libwakuwaku_codec.so.${PROJECT_VERSION}
              dev:--strip-all:${CMAKE_INSTALL_BINDIR}/wk-codegen
              dev:--strip-debug:${lib}/libwakuwaku.a
              dev:--strip-debug:${lib}/libwakuwaku_codec.a
              tools:--strip-all:${CMAKE_INSTALL_BINDIR}/wk)
      string(REPLACE ":" ";" f "${f}")
      list(GET f 0 c)
      list(GET f 1 how)
      list(GET f 2 path)
      install(CODE "
        set(f \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${path}\")
        execute_process(COMMAND strip ${how} --remove-section=.comment --remove-section=.note
                                --enable-deterministic-archives \"\${f}\" RESULT_VARIABLE rc)
        if(rc)
          message(FATAL_ERROR \"strip \${f} failed\")
        endif()" COMPONENT ${c})
    endforeach()
  endif()

  # CPack only for the project built on its own: a project that has
  # wakuwaku in a subdirectory packages itself.
  if(NOT CMAKE_SOURCE_DIR STREQUAL PROJECT_SOURCE_DIR)
    return()
  endif()
  set(v ${PROJECT_VERSION}-${WK_DEB_RELEASE})
  set(CPACK_GENERATOR DEB)
  set(CPACK_PACKAGE_NAME ${PROJECT_NAME})
  set(CPACK_PACKAGE_VENDOR "the wakuwaku authors")
  set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
  # CPackDeb puts a summary it did not make itself before each
  # component's description: its own default leaves the first line of
  # CPACK_COMPONENT_<C>_DESCRIPTION the synopsis.
  set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${CMAKE_PROJECT_NAME} built using CMake")
  set(CPACK_RESOURCE_FILE_LICENSE ${license})
  set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
  set(CPACK_DEB_COMPONENT_INSTALL ON)
  set(CPACK_COMPONENTS_ALL ${WK_DEB_COMPONENTS})
  set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
  set(CPACK_DEBIAN_PACKAGE_RELEASE ${WK_DEB_RELEASE})
  set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${WK_DEB_MAINTAINER}")
  set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
  set(CPACK_DEBIAN_PACKAGE_SOURCE ${PROJECT_NAME})
  set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
  # Depends from the ELF files (dpkg-shlibdeps); the libraries' shlibs
  # control files for the packages built against them.
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
  set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
  # libwakuwaku_codec.so.0 needs libwakuwaku.so.0, which no installed
  # package has yet: found in the build tree, its dependency written below.
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR})
  foreach(c IN LISTS WK_DEB_COMPONENTS)
    string(TOUPPER ${c} C)
    set(CPACK_DEBIAN_${C}_PACKAGE_NAME ${WK_DEB_NAME_${c}})
  endforeach()
  # The shared libraries' packages run ldconfig through dpkg's trigger, not
  # from maintainer scripts; and they carry a symbols file. CPack can do
  # neither itself: cmake/deb/finish.cmake, after it (CMake 3.19 on).
  foreach(C LIB CODEC)
    set(CPACK_DEBIAN_${C}_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/cmake/deb/triggers)
  endforeach()
  set(CPACK_POST_BUILD_SCRIPTS ${PROJECT_SOURCE_DIR}/cmake/deb/finish.cmake)
  set(CPACK_WK_DEB_SYMBOLS_VERSION ${PROJECT_VERSION})
  set(CPACK_WK_DEB_DEV_PACKAGE ${WK_DEB_NAME_dev})
  string(REGEX REPLACE "^/" "" so "${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/libwakuwaku")
  set(CPACK_WK_DEB_LIBRARY_PACKAGES
      "${WK_DEB_NAME_lib}:${so}.so.${PROJECT_VERSION};${WK_DEB_NAME_codec}:${so}_codec.so.${PROJECT_VERSION}")
  set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
  set(CPACK_DEBIAN_CODEC_PACKAGE_SECTION libs)
  set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
  set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
  set(CPACK_DEBIAN_CODEC_PACKAGE_DEPENDS "${WK_DEB_NAME_lib} (= ${v})")
  # The CMake package and the .pc files name hiredis, libsodium, OpenSSL
  # and jansson through pkg-config; wakuwaku_generate() compiles with them.
  set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
      "${WK_DEB_NAME_lib} (= ${v}), ${WK_DEB_NAME_codec} (= ${v}), libhiredis-dev, libsodium-dev, libssl-dev, libjansson-dev, pkgconf | pkg-config")
  set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "cmake")
  set(CPACK_DEBIAN_TOOLS_PACKAGE_SUGGESTS "redis-server | valkey-server")

  # The Description: a synopsis line, then the long description (CPack
  # indents it).
  set(about "wakuwaku lets the replicas of a service coordinate through Redis or
Valkey: locks (plain, fenced, reader-writer), semaphores, caches, rate
limiters, settings, pipes and live views, named in a schema and reached
through capabilities.")
  set(CPACK_COMPONENT_LIB_DESCRIPTION "coordination of service replicas through Redis (library)
${about}
.
This package has the shared library.")
  set(CPACK_COMPONENT_CODEC_DESCRIPTION "coordination of service replicas through Redis (JSON codec)
${about}
.
This package has the JSON body codec that code generated by wk-codegen
links (the core library does not link jansson).")
  set(CPACK_COMPONENT_DEV_DESCRIPTION "coordination of service replicas through Redis (development files)
${about}
.
This package has the headers, the static libraries, the pkg-config files,
the CMake package (find_package(wakuwaku), wakuwaku_generate()) and
wk-codegen, which generates a service's typed C accessors from its schema.")
  set(CPACK_COMPONENT_TOOLS_DESCRIPTION "coordination of service replicas through Redis (command line)
${about}
.
This package has wk, the operator's command line: it inspects and repairs
a service's entities in Redis, driven by the service's own schema.")
  include(CPack)
endfunction()

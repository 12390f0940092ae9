# cmake/deb/finish.cmake — run by cpack after it wrote the .deb files
# (CPACK_POST_BUILD_SCRIPTS, cmake/WakuwakuDeb.cmake). For each shared
# library's package (CPACK_WK_DEB_LIBRARY_PACKAGES: its name, a colon,
# the library's path in it):
#
#   1. the maintainer scripts CPack writes to call ldconfig are dropped:
#      the package's triggers file (activate-noawait ldconfig) does that,
#      as Debian wants (lintian: maintscript-calls-ldconfig);
#   2. dpkg-gensymbols writes its symbols control file (every exported
#      symbol, with the upstream version that first had it: Debian wants
#      no revision there), so that a program built against it depends on
#      the version it needs; its Build-Depends-Package is the -dev
#      package (CPACK_WK_DEB_DEV_PACKAGE).
#
# The package is then built again from the same files (dpkg-deb -b).
foreach(deb IN LISTS CPACK_PACKAGE_FILES)
  get_filename_component(file ${deb} NAME)
  foreach(entry IN LISTS CPACK_WK_DEB_LIBRARY_PACKAGES)
    string(REPLACE ":" ";" entry "${entry}")
    list(GET entry 0 package)
    list(GET entry 1 library)
    if(NOT file MATCHES "^${package}_")
      continue()
    endif()
    set(work ${CPACK_TOPLEVEL_DIRECTORY}/finish-${package})
    file(REMOVE_RECURSE ${work})
    file(MAKE_DIRECTORY ${work})
    execute_process(COMMAND dpkg-deb -R ${deb} ${work}/root RESULT_VARIABLE rc)
    if(rc)
      message(FATAL_ERROR "dpkg-deb -R ${deb} failed")
    endif()
    file(REMOVE ${work}/root/DEBIAN/postinst ${work}/root/DEBIAN/postrm)
    execute_process(COMMAND dpkg-gensymbols -p${package} -v${CPACK_WK_DEB_SYMBOLS_VERSION} -Proot
                            -eroot/${library} -Oroot/DEBIAN/symbols
                    WORKING_DIRECTORY ${work} OUTPUT_QUIET RESULT_VARIABLE rc)
    if(rc)
      message(FATAL_ERROR "dpkg-gensymbols for ${package} failed")
    endif()
    # Which -dev package a program's Build-Depends name for it (dpkg-shlibdeps
    # takes its minimal version from there).
    file(READ ${work}/root/DEBIAN/symbols symbols)
    string(FIND "${symbols}" "\n" eol)
    math(EXPR eol "${eol} + 1")
    string(SUBSTRING "${symbols}" 0 ${eol} head)
    string(SUBSTRING "${symbols}" ${eol} -1 rest)
    file(WRITE ${work}/root/DEBIAN/symbols
         "${head}* Build-Depends-Package: ${CPACK_WK_DEB_DEV_PACKAGE}\n${rest}")
    file(CHMOD ${work}/root/DEBIAN/symbols PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
    execute_process(COMMAND dpkg-deb --root-owner-group -Zgzip -b ${work}/root ${deb}
                    OUTPUT_QUIET RESULT_VARIABLE rc)
    if(rc)
      message(FATAL_ERROR "dpkg-deb -b ${deb} failed")
    endif()
    file(REMOVE_RECURSE ${work})
  endforeach()
endforeach()

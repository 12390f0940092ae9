# cmake/WakuwakuGenerate.cmake — wakuwaku_generate(): run wk-codegen on a
# schema at build time and make a library of the generated code.
#
#   wakuwaku_generate(TARGET <name> SCHEMA <schema.json>
#                     [SERVICE <service>] [OUTPUT_DIR <dir>])
#
# Creates the static library <name> from <service>.c, whose include
# directory holds <service>.h, linked (PUBLIC) with wakuwaku_codec (the
# JSON body codec, which brings jansson) and wakuwaku. Link your
# program with <name> and `#include "<service>.h"`.
#
#   SCHEMA      the schema (relative paths are from the current source dir).
#   SERVICE     the schema's "service" (it names the files); default: read
#               from the schema (CMake >= 3.19), else <name>. wk-codegen
#               fails with a clear message when it does not match.
#   OUTPUT_DIR  where the files go; default ${CMAKE_CURRENT_BINARY_DIR}/<name>.
#
# The files are regenerated when the schema or wk-codegen changes. Inside
# the wakuwaku tree (or a project that add_subdirectory()s it) the
# wk-codegen target is used; otherwise the wk-codegen program on PATH (or
# WK_CODEGEN_EXECUTABLE), and the libraries `wakuwaku_codec`, `wakuwaku`
# and jansson.
include_guard(GLOBAL)

function(wakuwaku_generate)
  cmake_parse_arguments(WKG "" "TARGET;SCHEMA;SERVICE;OUTPUT_DIR" "" ${ARGN})
  if(NOT WKG_TARGET OR NOT WKG_SCHEMA)
    message(FATAL_ERROR "wakuwaku_generate: TARGET and SCHEMA are required")
  endif()
  if(WKG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "wakuwaku_generate: unknown arguments ${WKG_UNPARSED_ARGUMENTS}")
  endif()
  get_filename_component(schema "${WKG_SCHEMA}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  if(NOT EXISTS "${schema}")
    message(FATAL_ERROR "wakuwaku_generate: schema ${schema} does not exist")
  endif()
  # A changed schema re-runs CMake, so a renamed service is seen.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${schema}")

  set(service "${WKG_SERVICE}")
  if(NOT service AND CMAKE_VERSION VERSION_GREATER_EQUAL 3.19)
    file(READ "${schema}" text)
    string(JSON service ERROR_VARIABLE json_error GET "${text}" service)
    if(json_error)
      set(service "")
    endif()
  endif()
  if(NOT service)
    set(service "${WKG_TARGET}")
  endif()

  set(outdir "${WKG_OUTPUT_DIR}")
  if(NOT outdir)
    set(outdir "${CMAKE_CURRENT_BINARY_DIR}/${WKG_TARGET}")
  endif()
  file(MAKE_DIRECTORY "${outdir}")

  if(TARGET wk-codegen)
    set(codegen wk-codegen)
    set(codegen_dep wk-codegen)
  else()
    if(NOT WK_CODEGEN_EXECUTABLE)
      find_program(WK_CODEGEN_EXECUTABLE wk-codegen REQUIRED)
    endif()
    set(codegen "${WK_CODEGEN_EXECUTABLE}")
    set(codegen_dep "${WK_CODEGEN_EXECUTABLE}")
  endif()

  add_custom_command(
    OUTPUT "${outdir}/${service}.h" "${outdir}/${service}.c"
    COMMAND ${codegen} "${schema}" -o "${outdir}" --expect-service "${service}"
    DEPENDS "${schema}" ${codegen_dep}
    COMMENT "wk-codegen: ${WKG_SCHEMA} -> ${service}.h, ${service}.c"
    VERBATIM)

  add_library(${WKG_TARGET} STATIC "${outdir}/${service}.c" "${outdir}/${service}.h")
  target_include_directories(${WKG_TARGET} PUBLIC "${outdir}")
  if(TARGET wakuwaku_codec_static)
    target_link_libraries(${WKG_TARGET} PUBLIC wakuwaku_codec_static wakuwaku_static)
  else()
    find_package(PkgConfig REQUIRED)
    pkg_check_modules(WK_GEN_JANSSON REQUIRED IMPORTED_TARGET jansson)
    target_link_libraries(${WKG_TARGET} PUBLIC wakuwaku_codec wakuwaku PkgConfig::WK_GEN_JANSSON)
  endif()
  if(DEFINED WK_WARNINGS)
    # inside the wakuwaku tree: generated code meets the project's warnings
    target_compile_options(${WKG_TARGET} PRIVATE ${WK_WARNINGS} -pedantic)
  endif()
endfunction()

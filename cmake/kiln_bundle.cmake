# Offline builds (scripts/gpu_check.sh on a machine that reaches no registry): the
# header-only forms of kiln's dependencies from the folder `scripts/setup --bundle`
# unpacked, instead of installed packages. spdlog, fmt and toml++ are used header
# only; zlib comes from the bundle's headers and the machine's own libz.so.1
# (every Linux with Python has one; Debian's libz.a is not position-independent).
set(kiln_inc ${KILN_BUNDLE}/usr/include)
if(NOT EXISTS ${KILN_BUNDLE}/.kiln-bundle)
  message(FATAL_ERROR "KILN_BUNDLE=${KILN_BUNDLE}: expected a folder made by "
                      "'scripts/setup --bundle DIR', found no .kiln-bundle marker")
endif()

function(kiln_bundle_target name)
  add_library(${name} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${kiln_inc}
                                           INTERFACE_COMPILE_DEFINITIONS "${ARGN}")
endfunction()

kiln_bundle_target(spdlog::spdlog SPDLOG_HEADER_ONLY SPDLOG_FMT_EXTERNAL FMT_HEADER_ONLY)
kiln_bundle_target(cxxopts::cxxopts "")
kiln_bundle_target(tomlplusplus::tomlplusplus TOML_HEADER_ONLY=1)
kiln_bundle_target(nlohmann_json::nlohmann_json "")
kiln_bundle_target(Catch2::Catch2 "")
list(APPEND CMAKE_MODULE_PATH ${KILN_BUNDLE}/usr/lib/cmake/Catch2)

find_library(KILN_LIBZ NAMES z libz.so.1 REQUIRED)
add_library(ZLIB::ZLIB SHARED IMPORTED GLOBAL)
set_target_properties(ZLIB::ZLIB PROPERTIES IMPORTED_LOCATION ${KILN_LIBZ}
                                            INTERFACE_INCLUDE_DIRECTORIES ${kiln_inc})

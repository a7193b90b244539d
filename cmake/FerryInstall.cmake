# `cmake --install <build> --prefix P` installs what a C++ project needs to use ferry, and `cpack -G DEB`
# packs the same files for Debian:
#   P/lib/libferry_{pipeline,io,stages,assembly,copy}.a      the libraries (static, position-independent)
#   P/include/ferry/...                                      the public headers: #include <ferry/ferry.h>
#   P/lib/cmake/ferry/                                       find_package(ferry 0.1) -> ferry::ferry
#   P/bin/ferry                                              the command
#   P/share/ferry/configs/*.yaml                             the shipped configs (ferry_CONFIGS_DIR)
# Components: `dev` (libraries, headers, CMake package), `runtime` (the command, the configs). The
# Python package is the `python` component, installed only when named (`--component python`), into
# its interpreter's own site-packages (python/CMakeLists.txt).
include(CMakePackageConfigHelpers)

set(FERRY_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/ferry")
set(FERRY_INSTALL_CONFIGSDIR "${CMAKE_INSTALL_DATADIR}/ferry/configs")

get_property(ferry_libraries GLOBAL PROPERTY FERRY_LIBRARIES)
install(TARGETS ${ferry_libraries} ferry EXPORT ferryTargets ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT dev)
install(FILES "${PROJECT_SOURCE_DIR}/ferry.h" "${FERRY_INCLUDE_DIR}/ferry/build_config.h"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/ferry" COMPONENT dev)
install(EXPORT ferryTargets NAMESPACE ferry:: DESTINATION "${FERRY_INSTALL_CMAKEDIR}" COMPONENT dev)
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/ferryConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/package/ferryConfig.cmake"
  INSTALL_DESTINATION "${FERRY_INSTALL_CMAKEDIR}"
  PATH_VARS FERRY_INSTALL_CONFIGSDIR)
# 0.x: a new minor version may change the API, so only 0.1.* satisfies find_package(ferry 0.1).
write_basic_package_version_file("${PROJECT_BINARY_DIR}/package/ferryConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/package/ferryConfig.cmake" "${PROJECT_BINARY_DIR}/package/ferryConfigVersion.cmake"
        "${PROJECT_SOURCE_DIR}/cmake/ferryImportedTargets.cmake"
        DESTINATION "${FERRY_INSTALL_CMAKEDIR}" COMPONENT dev)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/configs/" DESTINATION "${FERRY_INSTALL_CONFIGSDIR}" COMPONENT runtime
        FILES_MATCHING PATTERN "*.yaml")

# cpack -G DEB (in the build folder): one package, `ferry`, for Debian 12, into /usr. ferry's libraries
# are static, so a program built against them links what they link: the -dev packages of libtorch,
# oneTBB, yaml-cpp, TurboJPEG, libpng and libwebp, whose CMake packages ferryConfig.cmake finds.
set(CPACK_PACKAGE_NAME ferry)
set(CPACK_PACKAGE_VENDOR "ferry")
set(CPACK_PACKAGE_CONTACT "ferry developers <ferry@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/ferry/ferry")
string(REGEX MATCH "^[0-9]+\\.[0-9]+" ferry_torch_minor "${Torch_VERSION}")
string(REGEX REPLACE "^([0-9]+)\\.([0-9]+)$" "\\1" ferry_torch_major "${ferry_torch_minor}")
string(REGEX REPLACE "^([0-9]+)\\.([0-9]+)$" "\\2" ferry_torch_next "${ferry_torch_minor}")
math(EXPR ferry_torch_next "${ferry_torch_next} + 1")
set(ferry_depends "libtbb-dev (>= 2021), libyaml-cpp-dev (>= 0.7), libturbojpeg0-dev, libpng-dev, libwebp-dev, libsimdjson-dev, libcurl4-openssl-dev | libcurl-dev, zlib1g-dev, libzstd-dev, liblzma-dev")
if(TORCH_INSTALL_PREFIX MATCHES "^/usr(/lib)?/?$" OR TORCH_INSTALL_PREFIX MATCHES "^/usr/lib/")
  # Debian's libtorch: ferry's code is compiled against its headers, so the same minor version.
  string(PREPEND ferry_depends
         "libtorch-dev (>= ${ferry_torch_minor}), libtorch-dev (<< ${ferry_torch_major}.${ferry_torch_next}), ")
  set(ferry_torch_note "")
else()
  # A libtorch from elsewhere (a pip wheel): no Debian package to depend on.
  set(ferry_torch_note " Built against libtorch ${Torch_VERSION} from ${TORCH_INSTALL_PREFIX}, which no Debian package provides: put the same libtorch on CMAKE_PREFIX_PATH.")
endif()
if(FERRY_SENTENCEPIECE_LIBRARY)  # libferry_sentencepiece.so (Note [sentencepiece module])
  string(APPEND ferry_depends ", libsentencepiece0")
endif()
if(FERRY_MALLOC_PACKAGE)  # the `ferry` command is linked to it (cmake/FerryMalloc.cmake)
  string(APPEND ferry_depends ", ${FERRY_MALLOC_PACKAGE}")
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${ferry_depends}")
# What tests/package/consumer.cmake checks the package's Depends for.
set(FERRY_DEB_DEPENDS "libtbb-dev;libyaml-cpp-dev;libturbojpeg0-dev;libpng-dev;libwebp-dev;libsimdjson-dev;libcurl4-openssl-dev;zlib1g-dev;libzstd-dev;liblzma-dev")
if(FERRY_MALLOC_PACKAGE)
  list(APPEND FERRY_DEB_DEPENDS "${FERRY_MALLOC_PACKAGE}")
endif()
if(NOT ferry_torch_note)
  list(APPEND FERRY_DEB_DEPENDS "libtorch-dev (>= ${ferry_torch_minor})")
endif()
set(ferry_cuda_note "")
if(FERRY_HAVE_CUDART)
  set(ferry_cuda_note " Linked with the CUDA runtime of the CUDA toolkit ${CUDAToolkit_VERSION} (not a Debian package), which programs built against it find through find_package(CUDAToolkit).")
endif()
set(CPACK_PACKAGE_DESCRIPTION
    "ferry keeps GPUs fed: a staged data loader (oneTBB flow graph, pinned staging, asynchronous copies) that delivers GPU-resident batches to a C++ training loop. This package holds the static libraries, the public headers and the CMake package (find_package(ferry)), the ferry command and its example configs. This is a ${FERRY_BUILD_KIND} build.${ferry_torch_note}${ferry_cuda_note}")
set(CPACK_GENERATOR DEB)
set(CPACK_SOURCE_GENERATOR "")
# Below a parent project (add_subdirectory), CPack would package the parent's whole build as "ferry":
# the packaging is the top-level project's to choose.
if(PROJECT_IS_TOP_LEVEL)
  include(CPack)
endif()

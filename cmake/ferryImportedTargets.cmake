# Imported targets that ferry's libraries link by name, made the same way in ferry's own build
# (cmake/FerryDependencies.cmake) and in its installed package (ferryConfig.cmake), after Torch has
# been found:
#   ferry::torch      libtorch: TORCH_LIBRARIES of the Torch package found here, so that an installed
#                     ferry names no path of the machine it was built on;
#   ferry::turbojpeg  libjpeg-turbo's TurboJPEG API, found by header and library name (Debian has no
#                     CMake package for it), so that a prefix on CMAKE_PREFIX_PATH works too;
#   ferry::webp       libwebp's decoder, found the same way (Debian ships only its pkg-config file);
#   ferry::zstd       libzstd, found the same way (its CMake package is not everywhere it is).
# GLOBAL, so that a parent project that add_subdirectory()s ferry links them through ferry::ferry.
if(NOT TARGET ferry::torch)
  add_library(ferry::torch INTERFACE IMPORTED GLOBAL)
  set_target_properties(ferry::torch PROPERTIES INTERFACE_LINK_LIBRARIES "${TORCH_LIBRARIES}")
endif()

if(NOT TARGET ferry::turbojpeg)
  find_path(FERRY_TURBOJPEG_INCLUDE_DIR NAMES turbojpeg.h)
  find_library(FERRY_TURBOJPEG_LIBRARY NAMES turbojpeg)
  if(FERRY_TURBOJPEG_INCLUDE_DIR AND FERRY_TURBOJPEG_LIBRARY)
    add_library(ferry::turbojpeg UNKNOWN IMPORTED GLOBAL)
    set_target_properties(ferry::turbojpeg PROPERTIES
      IMPORTED_LOCATION "${FERRY_TURBOJPEG_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${FERRY_TURBOJPEG_INCLUDE_DIR}")
  else()
    set(FERRY_TURBOJPEG_NOT_FOUND_MESSAGE
        "ferry: TurboJPEG (libjpeg-turbo) not found: turbojpeg.h: ${FERRY_TURBOJPEG_INCLUDE_DIR}, libturbojpeg: ${FERRY_TURBOJPEG_LIBRARY} (Debian: apt-get install libturbojpeg0-dev, or put its prefix on CMAKE_PREFIX_PATH)")
  endif()
endif()

if(NOT TARGET ferry::webp)
  find_path(FERRY_WEBP_INCLUDE_DIR NAMES webp/decode.h)
  find_library(FERRY_WEBP_LIBRARY NAMES webp)
  if(FERRY_WEBP_INCLUDE_DIR AND FERRY_WEBP_LIBRARY)
    add_library(ferry::webp UNKNOWN IMPORTED GLOBAL)
    set_target_properties(ferry::webp PROPERTIES
      IMPORTED_LOCATION "${FERRY_WEBP_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${FERRY_WEBP_INCLUDE_DIR}")
  else()
    set(FERRY_WEBP_NOT_FOUND_MESSAGE
        "ferry: libwebp not found: webp/decode.h: ${FERRY_WEBP_INCLUDE_DIR}, libwebp: ${FERRY_WEBP_LIBRARY} (Debian: apt-get install libwebp-dev, or put its prefix on CMAKE_PREFIX_PATH)")
  endif()
endif()

if(NOT TARGET ferry::zstd)
  find_path(FERRY_ZSTD_INCLUDE_DIR NAMES zstd.h)
  find_library(FERRY_ZSTD_LIBRARY NAMES zstd)
  if(FERRY_ZSTD_INCLUDE_DIR AND FERRY_ZSTD_LIBRARY)
    add_library(ferry::zstd UNKNOWN IMPORTED GLOBAL)
    set_target_properties(ferry::zstd PROPERTIES
      IMPORTED_LOCATION "${FERRY_ZSTD_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${FERRY_ZSTD_INCLUDE_DIR}")
  else()
    set(FERRY_ZSTD_NOT_FOUND_MESSAGE
        "ferry: libzstd not found: zstd.h: ${FERRY_ZSTD_INCLUDE_DIR}, libzstd: ${FERRY_ZSTD_LIBRARY} (Debian: apt-get install libzstd-dev, or put its prefix on CMAKE_PREFIX_PATH)")
  endif()
endif()

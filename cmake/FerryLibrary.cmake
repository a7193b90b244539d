# ferry_library(<name> SOURCES <file>... PUBLIC_HEADERS <file>...)
#
# A static library ferry_<name> (ferry::<name>, exported under that name) of one folder of ferry's
# code. Its PUBLIC_HEADERS are what a program using ferry includes, as <ferry/<folder>/<file>>: they are
# installed under include/ferry/, and may include only each other (tests/check_public_headers.cmake).
# Every other header stays internal: not installed, reachable only from ferry's own build.
#
# Inside the build, ferry's code, its tests and its examples include the same paths: the build tree's
# include/ferry/<folder> is a link to the folder (see the top-level CMakeLists.txt).
function(ferry_library name)
  cmake_parse_arguments(LIB "" "" "SOURCES;PUBLIC_HEADERS" ${ARGN})
  add_library(ferry_${name} STATIC ${LIB_SOURCES})
  add_library(ferry::${name} ALIAS ferry_${name})
  set_target_properties(ferry_${name} PROPERTIES EXPORT_NAME ${name})
  target_include_directories(ferry_${name} PUBLIC
    "$<BUILD_INTERFACE:${FERRY_INCLUDE_DIR}>" "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
  # ferry's headers use C++20: a consumer compiling as C++17 gets it too instead of a puzzling error.
  target_compile_features(ferry_${name} PUBLIC cxx_std_20)
  target_link_libraries(ferry_${name} PRIVATE $<BUILD_INTERFACE:ferry_warnings>)

  file(RELATIVE_PATH folder "${PROJECT_SOURCE_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}")
  foreach(header IN LISTS LIB_PUBLIC_HEADERS)
    get_filename_component(subfolder "${folder}/${header}" DIRECTORY)
    install(FILES "${header}" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/ferry/${subfolder}" COMPONENT dev)
    set_property(GLOBAL APPEND PROPERTY FERRY_PUBLIC_HEADERS "${folder}/${header}")
  endforeach()
  set_property(GLOBAL APPEND PROPERTY FERRY_LIBRARIES ferry_${name})
endfunction()

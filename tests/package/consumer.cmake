# Builds and runs examples/consumer (a training loop over batches from a YAML config) against ferry as
# a user gets it, and checks what the user gets. Run with cmake -P, one MODE:
#   install   `cmake --install BUILD --prefix WORK/prefix`; the consumer finds it through
#             find_package(ferry) with only that prefix on CMAKE_PREFIX_PATH, compiled as C++17 (ferry::ferry
#             must raise it to C++20 itself); and the dev component alone is a package that is found
#   deb       `cpack -G DEB` in BUILD, the package unpacked into WORK/root; the consumer finds WORK/root/usr
#   subdirectory  tests/package/parent, which add_subdirectory()s the source tree SOURCE (and gets no CPack)
#   plugin    `cmake --install` as for install; then examples/plugin, copied as a user would, built against it,
#             run by the installed `ferry run` (from its own config's plugins: key) and from Python (PYTHON,
#             with PYTHONPATH set by the caller): every value checked, and the command's batches against
#             Python's (check.py --digest)
# Other variables: SOURCE (ferry's checkout), BUILD (its build folder), WORK (scratch, emptied first),
# GENERATOR and CXX (as ferry's build), DEPENDS (deb: text the package's Depends must hold, ;-separated),
# CXX_FLAGS and LINKER_FLAGS (ferry's build's compile and executable link flags: a sanitizer build's
# consumer is built as ferry is).
cmake_minimum_required(VERSION 3.22)

# run(COMMAND ... [WORKING_DIRECTORY dir] [OUTPUT var] [EXPECT_FAILURE]): fails unless it exits 0 (with
# EXPECT_FAILURE: unless it exits 2, as the command does for bad usage or an invalid config).
function(run)
  cmake_parse_arguments(RUN "EXPECT_FAILURE" "WORKING_DIRECTORY;OUTPUT" "COMMAND" ${ARGN})
  list(JOIN RUN_COMMAND " " shown)
  message(STATUS "$ ${shown}")
  if(NOT RUN_WORKING_DIRECTORY)
    set(RUN_WORKING_DIRECTORY "${WORK}")
  endif()
  execute_process(COMMAND ${RUN_COMMAND} WORKING_DIRECTORY "${RUN_WORKING_DIRECTORY}"
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(RUN_EXPECT_FAILURE AND NOT status EQUAL 2)
    message(FATAL_ERROR "expected exit status 2, found ${status}: ${shown}\n${out}")
  elseif(NOT RUN_EXPECT_FAILURE AND NOT status EQUAL 0)
    message(FATAL_ERROR "failed (${status}): ${shown}\n${out}")
  endif()
  if(RUN_OUTPUT)
    set(${RUN_OUTPUT} "${out}" PARENT_SCOPE)
  endif()
endfunction()

function(expect_files prefix)
  foreach(path IN LISTS ARGN)
    if(NOT EXISTS "${prefix}/${path}")
      message(FATAL_ERROR "not installed: ${prefix}/${path}")
    endif()
  endforeach()
endfunction()

# What a user meets in an installed tree: the package, the public headers, the command, the configs;
# and no internal header.
function(check_tree prefix)
  file(GLOB libdir RELATIVE "${prefix}" "${prefix}/lib*/cmake/ferry/ferryConfig.cmake")
  if(NOT libdir)
    message(FATAL_ERROR "no lib*/cmake/ferry/ferryConfig.cmake under ${prefix}")
  endif()
  expect_files("${prefix}" include/ferry/ferry.h include/ferry/build_config.h include/ferry/pipeline/pipeline.h
               include/ferry/assembly/config_loader.h include/ferry/copy/async_copy_handle.h bin/ferry
               share/ferry/configs/demo.yaml)
  # The sentencepiece module, where the installed command looks for it (lib/ferry beside bin/), when the
  # build made one.
  if(EXISTS "${BUILD}/lib/libferry_sentencepiece.so")
    file(GLOB module "${prefix}/lib*/ferry/libferry_sentencepiece.so")
    if(NOT module)
      message(FATAL_ERROR "not installed: ${prefix}/lib*/ferry/libferry_sentencepiece.so")
    endif()
  endif()
  foreach(internal IN ITEMS pipeline/pipeline_graph.h pipeline/bounded_queue.h stages/parallel_copy.h
                            copy/copy_worker.h io/formats/indexed_dataset_format.h)
    if(EXISTS "${prefix}/include/ferry/${internal}")
      message(FATAL_ERROR "an internal header was installed: include/ferry/${internal}")
    endif()
  endforeach()
  file(GLOB_RECURSE files RELATIVE "${prefix}" "${prefix}/*")
  list(LENGTH files count)
  message(STATUS "installed tree: ${count} files under ${prefix}")
  run(COMMAND "${prefix}/bin/ferry" validate "${prefix}/share/ferry/configs/synthetic.yaml" OUTPUT validated)
  message(STATUS "${validated}")
endfunction()

function(build_and_run source prefix)
  set(args -S "${source}" -B "${WORK}/consumer" -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release
           "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
           "-DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS}" ${ARGN})
  if(prefix)
    list(APPEND args "-DCMAKE_PREFIX_PATH=${prefix}")
  endif()
  run(COMMAND "${CMAKE_COMMAND}" ${args} OUTPUT configured)
  run(COMMAND "${CMAKE_COMMAND}" --build "${WORK}/consumer" --target train_from_yaml)
  run(COMMAND "${WORK}/consumer/train_from_yaml" "${SOURCE}/examples/consumer/train.yaml" OUTPUT trained)
  message(STATUS "${trained}")
endfunction()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
if(MODE STREQUAL "install")
  run(COMMAND "${CMAKE_COMMAND}" --install "${BUILD}" --prefix "${WORK}/prefix")
  check_tree("${WORK}/prefix")
  build_and_run("${SOURCE}/examples/consumer" "${WORK}/prefix" -DCMAKE_CXX_STANDARD=17)
  # The dev component alone (libraries, headers, CMake package; no command, no configs) is a package
  # find_package() accepts.
  run(COMMAND "${CMAKE_COMMAND}" --install "${BUILD}" --prefix "${WORK}/dev-prefix" --component dev)
  run(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE}/examples/consumer" -B "${WORK}/dev-consumer" -G "${GENERATOR}"
      "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_PREFIX_PATH=${WORK}/dev-prefix")
  message(STATUS "find_package(ferry) accepts an install of the dev component alone")
elseif(MODE STREQUAL "deb")
  run(COMMAND cpack --config "${BUILD}/CPackConfig.cmake" -G DEB -B "${WORK}/package")
  file(GLOB deb "${WORK}/package/*.deb")
  if(NOT deb)
    message(FATAL_ERROR "cpack made no .deb in ${WORK}/package")
  endif()
  run(COMMAND dpkg-deb --field "${deb}" Package Version Architecture Depends OUTPUT fields)
  message(STATUS "${deb}:\n${fields}")
  foreach(expected IN LISTS DEPENDS)
    string(FIND "${fields}" "${expected}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "the package's Depends lacks '${expected}'")
    endif()
  endforeach()
  run(COMMAND dpkg-deb -x "${deb}" "${WORK}/root")
  check_tree("${WORK}/root/usr")
  build_and_run("${SOURCE}/examples/consumer" "${WORK}/root/usr")
elseif(MODE STREQUAL "subdirectory")
  build_and_run("${SOURCE}/tests/package/parent" "" "-DFERRY_SOURCE_DIR=${SOURCE}")
  # Packaging is the parent's to choose: ferry below it must not make the parent's build a "ferry" .deb.
  if(EXISTS "${WORK}/consumer/CPackConfig.cmake")
    message(FATAL_ERROR "ferry below a parent project included CPack: ${WORK}/consumer/CPackConfig.cmake")
  endif()
elseif(MODE STREQUAL "plugin")
  run(COMMAND "${CMAKE_COMMAND}" --install "${BUILD}" --prefix "${WORK}/prefix")
  file(COPY "${SOURCE}/examples/plugin/" DESTINATION "${WORK}/plugin")
  run(COMMAND "${CMAKE_COMMAND}" -S "${WORK}/plugin" -B "${WORK}/plugin/build" -G "${GENERATOR}"
      -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
      "-DCMAKE_SHARED_LINKER_FLAGS=${LINKER_FLAGS}" "-DCMAKE_MODULE_LINKER_FLAGS=${LINKER_FLAGS}"
      "-DCMAKE_PREFIX_PATH=${WORK}/prefix")
  run(COMMAND "${CMAKE_COMMAND}" --build "${WORK}/plugin/build")
  run(COMMAND "${WORK}/prefix/bin/ferry" run records.yaml --digest digest.txt --set stats.progress=off
      WORKING_DIRECTORY "${WORK}/plugin" OUTPUT ran)
  message(STATUS "${ran}")
  run(COMMAND "${WORK}/prefix/bin/ferry" validate records.yaml --set source.colums=5 WORKING_DIRECTORY "${WORK}/plugin"
      OUTPUT refused EXPECT_FAILURE)
  message(STATUS "${refused}")
  run(COMMAND "${PYTHON}" check.py build/libferry_records.so records.yaml --digest digest.txt
      WORKING_DIRECTORY "${WORK}/plugin" OUTPUT checked)
  message(STATUS "plugin example: ${checked}")
else()
  message(FATAL_ERROR "MODE must be install, deb, subdirectory or plugin, not '${MODE}'")
endif()

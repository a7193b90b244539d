# cmake -DFRESH=<path>[;<path>...] -P run_fresh.cmake -- <command> [args...]
# Removes FRESH (the folder or files the command writes), then runs the command and fails unless it
# exits 0, printing its output. For CTest fixtures that make a dataset: `ferry make-dataset` refuses a
# non-empty folder or an existing dataset, so a second ctest run must start from none.
set(command "")
set(after_dashes FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_dashes)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(after_dashes TRUE)
  endif()
endforeach()
if(NOT FRESH OR NOT command)
  message(FATAL_ERROR "usage: cmake -DFRESH=<path>[;<path>...] -P run_fresh.cmake -- <command> [args...]")
endif()
file(REMOVE_RECURSE ${FRESH})
execute_process(COMMAND ${command} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code STREQUAL "0")
  message(FATAL_ERROR "exit ${code}\nstdout: ${out}\nstderr: ${err}")
endif()
message(STATUS "${out}")

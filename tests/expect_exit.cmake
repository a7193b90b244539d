# Runs COMMAND with ARGS and fails unless it exits with EXPECT.
execute_process(COMMAND ${COMMAND} ${ARGS} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code STREQUAL "${EXPECT}")
  message(FATAL_ERROR "expected exit ${EXPECT}, got ${code}\nstdout: ${out}\nstderr: ${err}")
endif()
message(STATUS "exit ${code} as expected; stderr: ${err}")

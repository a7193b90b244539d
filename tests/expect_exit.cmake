# Runs COMMAND with ARGS and fails unless it exits with EXPECT and, when MATCH is given, its stdout
# and stderr together match the regular expression MATCH.
execute_process(COMMAND ${COMMAND} ${ARGS} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code STREQUAL "${EXPECT}")
  message(FATAL_ERROR "expected exit ${EXPECT}, got ${code}\nstdout: ${out}\nstderr: ${err}")
endif()
if(DEFINED MATCH AND NOT "${out}${err}" MATCHES "${MATCH}")
  message(FATAL_ERROR "exit ${code} as expected, but the output does not match '${MATCH}'\nstdout: ${out}\nstderr: ${err}")
endif()
message(STATUS "exit ${code} as expected; stderr: ${err}")

# `pip install .` as the README gives it, without a network: a new venv that sees the system's torch
# (--system-site-packages), `pip install --no-build-isolation --no-index SOURCE` (CMake builds the
# extension in WORK/build), then, from another folder, the package imported from the venv, a pipeline
# run and a start_copy checked. Variables: PYTHON (the interpreter the package is for), SOURCE, WORK.
cmake_minimum_required(VERSION 3.22)

function(run)
  list(JOIN ARGN " " shown)
  message(STATUS "$ ${shown}")
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "failed (${status}): ${shown}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/elsewhere")
run("${PYTHON}" -m venv --system-site-packages "${WORK}/venv")
# --system-site-packages shows the base interpreter's packages; where PYTHON is itself a venv's (the
# GPU machine's), torch lives in that venv: a .pth file shows its folder too.
execute_process(COMMAND "${PYTHON}" -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))"
                OUTPUT_VARIABLE torch_site OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
file(GLOB venv_site "${WORK}/venv/lib/python*/site-packages")
file(WRITE "${venv_site}/ferry-test-torch.pth" "${torch_site}\n")
set(ENV{FERRY_BUILD_DIR} "${WORK}/build")
set(ENV{PIP_NO_CACHE_DIR} 1)
set(ENV{PYTHONPATH} "")
run("${WORK}/venv/bin/python" -m pip install --no-build-isolation --no-index "${SOURCE}")
execute_process(COMMAND "${WORK}/venv/bin/python" "${SOURCE}/tests/package/pip_check.py" "${WORK}/venv"
                WORKING_DIRECTORY "${WORK}/elsewhere" RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the pip-installed package failed its check (${status})")
endif()

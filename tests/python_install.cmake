# cmake -DBUILD=<build dir> -DPYTHON=<python> -DINSTALL_DIR=<FERRY_PYTHON_INSTALL_DIR> -DSTAGE=<folder> -P python_install.cmake
# `cmake --install --component python` into a staging root (DESTDIR, so the real site-packages is
# untouched), then imports the installed package in a fresh interpreter, away from the build tree,
# and runs a pipeline and a copy: the installed module must find libtorch and its other libraries.
file(REMOVE_RECURSE "${STAGE}")
set(ENV{DESTDIR} "${STAGE}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD}" --component python RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code STREQUAL "0")
  message(FATAL_ERROR "cmake --install failed (${code}):\n${out}${err}")
endif()
set(ENV{PYTHONPATH} "${STAGE}${INSTALL_DIR}")
set(check [=[
import ferry, torch
assert ferry.__file__.startswith(__import__("os").environ["PYTHONPATH"]), ferry.__file__
config = {"source": {"kind": "synthetic", "samples": 10, "fields": [{"name": "x", "dtype": "int32", "shape": [3]}]},
          "batch_size": 4, "transfer": {"device": "cpu"}}
with ferry.Pipeline(config) as pipeline:
    assert [b["x"].shape[0] for b in pipeline] == [4, 4, 2]
assert ferry.start_copy({"a": [torch.ones(2)]}, "cpu").get()["a"][0].tolist() == [1.0, 1.0]
print("installed ferry", ferry.__version__, "imports and runs from", ferry.__file__)
]=])
execute_process(COMMAND "${PYTHON}" -c "${check}" WORKING_DIRECTORY "${STAGE}" RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT code STREQUAL "0")
  message(FATAL_ERROR "the installed package failed (${code})")
endif()

# Fails when a file includes a layer it must not (docs/design.md, "Folders and what they may include").
# Each library folder lists the folders it may include, as they appear after "ferry/":
#   pipeline/       the engine: itself only
#   io/util/        helpers: the engine
#   io/remote/      data files over HTTP(S), S3 and pipes, compressed ones, the shard cache: the engine, io/util
#   io/samplers/    orders; io/formats/: dataset readers and writers: the engine, io/util and io/remote
#   io/decoders/    decoders and their encoders: also io/formats (a decoder reads a Source's FieldSpec)
#   io/transforms/  sample transforms: the engine, io/util and io/formats (a transform declares FieldSpecs)
#   io/workers/     user Python code in worker processes: io/formats and io/transforms (its kinds)
#   stages/         all of io/
#   assembly/       YAML -> Config -> pipeline: everything below it
#   copy/           start_copy: the engine and the stages' packing, never data formats or the config
# Inside the libraries every project header is included as "ferry/<folder>/<file>", the path it has once
# installed; elsewhere (cli/, python/, examples/, bench/, tests/) as <ferry/...>, never by its folder
# alone ("io/..."), and a program's own files as "<its folder>/..." (cli/ never includes python/'s).
cmake_minimum_required(VERSION 3.22)
set(rules
  "pipeline:pipeline/"
  "io/util:pipeline/|io/util/"
  "io/remote:pipeline/|io/util/|io/remote/"
  "io/samplers:pipeline/|io/util/|io/samplers/"
  "io/formats:pipeline/|io/util/|io/remote/|io/formats/"
  "io/decoders:pipeline/|io/util/|io/formats/|io/decoders/"
  "io/transforms:pipeline/|io/util/|io/formats/|io/transforms/"
  "io/workers:pipeline/|io/util/|io/formats/|io/transforms/|io/workers/"
  "stages:pipeline/|io/|stages/"
  "assembly:pipeline/|io/|stages/|assembly/"
  "copy:pipeline/|stages/|copy/")
set(violations "")
foreach(rule IN LISTS rules)
  string(REPLACE ":" ";" parts "${rule}")
  list(GET parts 0 folder)
  list(GET parts 1 allowed)
  file(GLOB files "${ROOT}/${folder}/*.h" "${ROOT}/${folder}/*.cpp")
  foreach(file IN LISTS files)
    file(STRINGS "${file}" lines REGEX "^#include [\"<]ferry/")
    foreach(line IN LISTS lines)
      if(NOT line MATCHES "^#include \"ferry/(${allowed}|build_config\\.h)")
        list(APPEND violations "${file}: ${line}")
      endif()
    endforeach()
    file(STRINGS "${file}" lines REGEX "^#include \"[^\"]*/")
    foreach(line IN LISTS lines)
      if(NOT line MATCHES "^#include \"ferry/")
        list(APPEND violations "${file}: ${line} (a project header is included as \"ferry/...\")")
      endif()
    endforeach()
  endforeach()
endforeach()
file(GLOB_RECURSE programs "${ROOT}/cli/*.h" "${ROOT}/cli/*.cpp" "${ROOT}/python/src/*.h" "${ROOT}/python/src/*.cpp"
     "${ROOT}/examples/*.h" "${ROOT}/examples/*.cpp" "${ROOT}/bench/*.cpp" "${ROOT}/tests/*.h" "${ROOT}/tests/*.cpp")
foreach(file IN LISTS programs)
  file(STRINGS "${file}" lines REGEX "^#include [\"<](pipeline|io|stages|assembly|copy|ferry)/")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^#include <ferry/")
      list(APPEND violations "${file}: ${line} (include ferry's headers as <ferry/...>, as a program using ferry does)")
    endif()
  endforeach()
  # A program includes ferry's libraries and its own files, never another program's: what two programs
  # share (the report, say) belongs in a library.
  file(RELATIVE_PATH relative "${ROOT}" "${file}")
  string(REGEX REPLACE "/.*" "" own "${relative}")
  file(STRINGS "${file}" lines REGEX "^#include \"[^\"]*/")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^#include \"${own}/")
      list(APPEND violations "${file}: ${line} (another program's file: move what programs share into a library)")
    endif()
  endforeach()
endforeach()
if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "layering violations:\n  ${text}")
endif()
message(STATUS "layering: every folder includes only the layers below it, through ferry/ paths")

# The malloc that ferry's own programs (the `ferry` command, the benchmarks) run with.
#
# Every tensor of a batch is a few heap objects (its TensorImpl, version counter, the batch's list),
# made on the pipeline's threads and freed on the consumer's. With glibc's malloc, those frees take
# the lock of the arena of the thread that made the object, while that thread is making the next
# batch's. On an H100 host a batch of 10 000 tensors cost its consumer 2.6-2.8 ms to drop with glibc
# and 0.5-0.6 ms with jemalloc; bench/transfer (d) went from 3.4-3.8 to 8.7 GB/s, and bench/latency's
# batches a second rose by 23-58% (tokens) and 28-102% (32 x 1 KiB) (docs/benchmarks.md, "The malloc").
#
# FERRY_MALLOC: AUTO (jemalloc, else tcmalloc, where found; glibc's otherwise), JEMALLOC, TCMALLOC
# (fail without it), SYSTEM. Sanitizer builds always use the system's: ASan and TSan replace malloc
# themselves. The libraries are not linked to any of them: a program using ferry chooses its own
# malloc (docs/benchmarks.md, "The malloc", says how Python can preload one).
set(FERRY_MALLOC "AUTO" CACHE STRING "malloc for ferry's programs: AUTO, JEMALLOC, TCMALLOC, SYSTEM")
set_property(CACHE FERRY_MALLOC PROPERTY STRINGS AUTO JEMALLOC TCMALLOC SYSTEM)
string(TOUPPER "${FERRY_MALLOC}" ferry_malloc_choice)
if(NOT ferry_malloc_choice MATCHES "^(AUTO|JEMALLOC|TCMALLOC|SYSTEM)$")
  message(FATAL_ERROR "FERRY_MALLOC is '${FERRY_MALLOC}': use AUTO, JEMALLOC, TCMALLOC or SYSTEM")
endif()

set(FERRY_MALLOC_LIBRARY "")
set(FERRY_MALLOC_NAME "system")
set(FERRY_MALLOC_PACKAGE "")  # the Debian package the `ferry` command then needs at run time
if("${CMAKE_CXX_FLAGS} ${CMAKE_EXE_LINKER_FLAGS}" MATCHES "-fsanitize=[^ ]*(address|thread|memory|leak)")
  set(FERRY_MALLOC_NAME "sanitizer")
  set(ferry_malloc_reason "(a sanitizer build: it brings its own)")
elseif(ferry_malloc_choice STREQUAL "SYSTEM")
  set(ferry_malloc_reason "(FERRY_MALLOC=SYSTEM)")
else()
  # The shared libraries by their runtime names first: a static libjemalloc.a linked in would serve,
  # but malloc_name() could not see it.
  find_library(FERRY_JEMALLOC_LIBRARY NAMES libjemalloc.so.2 libjemalloc.so)
  find_library(FERRY_TCMALLOC_LIBRARY NAMES libtcmalloc_minimal.so.4 libtcmalloc_minimal.so)
  if(ferry_malloc_choice MATCHES "^(AUTO|JEMALLOC)$" AND FERRY_JEMALLOC_LIBRARY)
    set(FERRY_MALLOC_LIBRARY "${FERRY_JEMALLOC_LIBRARY}")
    set(FERRY_MALLOC_NAME "jemalloc")
    set(FERRY_MALLOC_PACKAGE "libjemalloc2")
  elseif(ferry_malloc_choice MATCHES "^(AUTO|TCMALLOC)$" AND FERRY_TCMALLOC_LIBRARY)
    set(FERRY_MALLOC_LIBRARY "${FERRY_TCMALLOC_LIBRARY}")
    set(FERRY_MALLOC_NAME "tcmalloc")
    set(FERRY_MALLOC_PACKAGE "libtcmalloc-minimal4")
  elseif(ferry_malloc_choice STREQUAL "AUTO")
    set(ferry_malloc_reason "(neither jemalloc nor tcmalloc found: apt install libjemalloc-dev)")
  else()
    message(FATAL_ERROR "FERRY_MALLOC=${FERRY_MALLOC} but its library was not found "
                        "(Debian: libjemalloc-dev or libgoogle-perftools-dev)")
  endif()
endif()
if(FERRY_MALLOC_LIBRARY)
  set(ferry_malloc_reason "${FERRY_MALLOC_LIBRARY}")
endif()
message(STATUS "ferry: programs' malloc: ${FERRY_MALLOC_NAME} ${ferry_malloc_reason}")

# Links `target` (an executable) to the chosen malloc. --no-as-needed: nothing in the program names
# the library, yet it must be loaded, and ahead of libc, for its malloc and free to be the ones used.
function(ferry_use_malloc target)
  if(FERRY_MALLOC_LIBRARY)
    target_link_libraries(${target} PRIVATE "-Wl,--push-state,--no-as-needed" "${FERRY_MALLOC_LIBRARY}"
                                            "-Wl,--pop-state")
  endif()
endfunction()

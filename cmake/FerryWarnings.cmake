# Warning flags live in one INTERFACE target that ferry's own targets link (never consumers').
add_library(ferry_warnings INTERFACE)
# C++ only: nvcc takes host-compiler flags another way (the gather kernel builds with its defaults).
set(ferry_cxx_warnings
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Woverloaded-virtual -Wimplicit-fallthrough
  # C++20 designated initializers that leave members at their defaults are idiomatic, not a slip.
  -Wno-missing-field-initializers
  $<$<BOOL:${FERRY_WERROR}>:-Werror>)
target_compile_options(ferry_warnings INTERFACE "$<$<COMPILE_LANGUAGE:CXX>:${ferry_cxx_warnings}>")

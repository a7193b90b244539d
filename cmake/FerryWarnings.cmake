# Warning flags live in one INTERFACE target that ferry's own targets link (never consumers').
add_library(ferry_warnings INTERFACE)
target_compile_options(ferry_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Woverloaded-virtual -Wimplicit-fallthrough
  # C++20 designated initializers that leave members at their defaults are idiomatic, not a slip.
  -Wno-missing-field-initializers
  $<$<BOOL:${FERRY_WERROR}>:-Werror>)

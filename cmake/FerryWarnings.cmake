# Warning flags live in one INTERFACE target that ferry's own targets link (never consumers').
add_library(ferry_warnings INTERFACE)
target_compile_options(ferry_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Woverloaded-virtual -Wimplicit-fallthrough
  $<$<BOOL:${FERRY_WERROR}>:-Werror>)

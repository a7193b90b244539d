#pragma once

#include <torch/csrc/utils/pybind.h>

namespace ferry::python {

/// ferry's exceptions on the Python side, created in ferry._C and re-exported by the package:
///   ferry.Error(RuntimeError)      a ferry::Error: attributes stage, sample, epoch, batch, cause
///   ferry.ConfigError(ferry.Error, ValueError)   a ferry::ConfigError: attribute problems, a list of
///                                  (location, key, message) tuples
///   ferry.UnifiedMemoryUnsupportedError(ferry.Error)   a ferry::UnifiedMemoryUnsupportedError:
///                                  unified memory cannot work here (ferry.uvm)
/// register_errors() adds them to `module` and installs the translator that turns the C++ exceptions
/// into them. Call once, from the module's init (with the GIL).
void register_errors(pybind11::module_& module);

}  // namespace ferry::python

#pragma once

#include <torch/csrc/utils/pybind.h>

namespace ferry::python {

/// Lets configs run their Python code on the decode threads of this process (decode.workers: threads):
/// the python source kind and transform then call ferry._worker.InProcess with the GIL held, instead of
/// worker processes. For code that releases the GIL (PIL, numpy, OpenCV).
void provide_in_process_python();

}  // namespace ferry::python

// ferry._C: the compiled part of the `ferry` Python package (python/ferry/ wraps it; see
// python/ferry/_C.pyi for the API as Python sees it).
#include <torch/csrc/utils/pybind.h>

#include <ferry/assembly/plugin.h>
#include <ferry/build_config.h>
#include <ferry/io/workers/python_code.h>
#include <ferry/pipeline/malloc_name.h>
#include <ferry/pipeline/pinned_pool.h>
#include "python_copy.h"
#include "python_errors.h"
#include "python_pipeline.h"
#include "python_runner.h"
#include "python_uvm.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "ferry's compiled core: the pipeline, the multi-tensor copier and unified memory (use the `ferry` package)";
  // Tensors cross into Python through torch's own binding, which must be initialised first.
  py::module_::import("torch");
  ferry::python::register_errors(m);

  m.attr("__version__") = FERRY_VERSION;
  m.attr("build_kind") = FERRY_BUILD_KIND;
  m.attr("build_reason") = FERRY_BUILD_REASON;
  m.attr("torch_version") = FERRY_TORCH_VERSION;
  m.def(
      "malloc_name", &ferry::malloc_name,
      "The malloc this process runs with and its version ('jemalloc 5.3.0-...', 'tcmalloc 2.10', 'glibc 2.36'). "
      "Python's is glibc's unless one is preloaded: LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 python ...");
  m.def(
      "load_plugin",
      [](const std::string& path) {
        py::gil_scoped_release unlocked;  // the plugin's registration needs no Python
        ferry::load_plugin(path);
      },
      py::arg("path"),
      "Loads a ferry plugin (a shared library built against this ferry with FERRY_PLUGIN) and registers its source "
      "kinds, decoders and transforms, for every config after. Loading one already loaded does nothing. Raises "
      "ferry.PluginError.");
  m.def("loaded_plugins", &ferry::loaded_plugins, "The plugins loaded so far, as absolute paths.");
  m.def("live_staging_bytes", &ferry::PinnedPool::live_bytes,
        "Staging bytes (pinned, or the pageable fallback) held by every pipeline of this process now.");

  // ferry.Pipeline.from_dataset(): the pickled dataset, held for configs that name its handle.
  m.def(
      "_hold_object",
      [](const py::bytes& payload, const std::string& description) {
        return ferry::detail::hold_object({std::string(payload), description});
      },
      py::arg("payload"), py::arg("description"));
  m.def("_release_object", &ferry::detail::release_object, py::arg("handle"));
  m.def("_set_worker_python", &ferry::detail::set_default_worker_python, py::arg("python"), py::arg("python_path"),
        "The interpreter (and the folder holding the ferry package) that worker processes run by default.");

  ferry::python::provide_in_process_python();
  ferry::python::bind_pipeline(m);
  ferry::python::bind_copy(m);
  ferry::python::bind_uvm(m);
}

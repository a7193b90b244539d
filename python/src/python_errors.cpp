#include "python_errors.h"

#include <exception>

#include <ferry/assembly/config_error.h>
#include <ferry/assembly/plugin.h>
#include <ferry/pipeline/error.h>
#include <ferry/pipeline/unified_memory.h>

namespace py = pybind11;

namespace ferry::python {

namespace {

// Borrowed for the life of the process: the module keeps a reference to each type.
PyObject* g_error = nullptr;
PyObject* g_config_error = nullptr;
PyObject* g_unified_memory_unsupported = nullptr;
PyObject* g_plugin_error = nullptr;

py::object optional_int(const std::optional<uint64_t>& value) {
  return value ? py::object(py::int_(*value)) : py::object(py::none());
}

// A Python str of ferry's text. Messages escape the bytes they show from files, but a path or a
// decoder's text may still hold bytes that are not UTF-8: those become \xNN escapes
// ("backslashreplace") rather than a UnicodeDecodeError that would replace ferry's error.
py::str text(const std::string& value) {
  PyObject* decoded = PyUnicode_DecodeUTF8(value.data(), static_cast<Py_ssize_t>(value.size()), "backslashreplace");
  if (!decoded) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(decoded);
}

// Raises `type` with ferry::Error's message and its context as attributes, so that Python code can
// tell which stage and which sample failed without parsing the message.
void raise(PyObject* type, const Error& error, py::object problems) {
  py::object instance = py::reinterpret_borrow<py::object>(type)(text(error.what()));
  instance.attr("stage") = error.stage().empty() ? py::object(py::none()) : py::object(text(error.stage()));
  instance.attr("sample") = optional_int(error.sample_index());
  instance.attr("epoch") = optional_int(error.epoch());
  instance.attr("batch") = optional_int(error.batch_index());
  instance.attr("cause") = text(error.cause());
  instance.attr("problems") = std::move(problems);
  PyErr_SetObject(type, instance.ptr());
}

}  // namespace

void register_errors(py::module_& module) {
  g_error = PyErr_NewExceptionWithDoc(
      "ferry._C.Error",
      "A failure ferry reports: the message names the stage, the sample and the cause. Attributes: "
      "stage (str or None), sample, epoch, batch (int or None), cause (str).",
      PyExc_RuntimeError, nullptr);
  py::object bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_config_error = PyErr_NewExceptionWithDoc(
      "ferry._C.ConfigError",
      "A config or state that cannot run; every problem found is listed, one per line. Attribute: "
      "problems, a list of (location, key, message) tuples.",
      bases.ptr(), nullptr);
  g_unified_memory_unsupported = PyErr_NewExceptionWithDoc(
      "ferry._C.UnifiedMemoryUnsupportedError",
      "Unified (CUDA managed) memory cannot work here: a CPU build of ferry, no CUDA device, a device "
      "without concurrent managed access, or a torch without torch.cuda.MemPool. The message says which.",
      g_error, nullptr);
  g_plugin_error = PyErr_NewExceptionWithDoc(
      "ferry._C.PluginError",
      "A plugin that cannot be loaded: a missing file, not a shared library or not a ferry plugin, built against "
      "another ferry or libtorch (both named), an entry point that failed, or a name already registered. Nothing "
      "of it was registered.",
      g_error, nullptr);
  module.add_object("Error", py::handle(g_error));
  module.add_object("PluginError", py::handle(g_plugin_error));
  module.add_object("ConfigError", py::handle(g_config_error));
  module.add_object("UnifiedMemoryUnsupportedError", py::handle(g_unified_memory_unsupported));

  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const ConfigError& error) {
      py::list problems;
      for (const ConfigProblem& problem : error.problems()) {
        problems.append(py::make_tuple(text(problem.location), text(problem.key), text(problem.message)));
      }
      raise(g_config_error, error, std::move(problems));
    } catch (const UnifiedMemoryUnsupportedError& error) {
      raise(g_unified_memory_unsupported, error, py::list());
    } catch (const PluginError& error) {
      raise(g_plugin_error, error, py::list());
    } catch (const Error& error) {
      raise(g_error, error, py::list());
    }
  });
}

}  // namespace ferry::python

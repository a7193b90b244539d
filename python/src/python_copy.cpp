#include "python_copy.h"

#include <optional>
#include <utility>

#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/tensor_numpy.h>

#include <ferry/pipeline/error.h>

namespace py = pybind11;

namespace ferry::python {

namespace {

// numpy.ndarray when numpy has been imported (no array can exist before), else null. Importing numpy
// here would cost ~100 ms for callers that never use it.
PyTypeObject* numpy_array_type() {
  static PyTypeObject* type = nullptr;
  if (type == nullptr) {
    PyObject* modules = PyImport_GetModuleDict();
    PyObject* numpy = PyDict_GetItemString(modules, "numpy");  // borrowed
    if (numpy == nullptr) return nullptr;
    PyObject* ndarray = PyObject_GetAttrString(numpy, "ndarray");  // kept for the process's life
    if (ndarray == nullptr) {
      PyErr_Clear();
      return nullptr;
    }
    type = reinterpret_cast<PyTypeObject*>(ndarray);
  }
  return type;
}

// A numpy array as a tensor sharing its memory, as torch.from_numpy() makes it; torch refuses
// negative strides (a reversed view), so those are copied to a contiguous array first.
at::Tensor array_to_tensor(py::handle array) {
  py::object strides = array.attr("strides");
  for (py::handle stride : strides) {
    if (stride.cast<int64_t>() < 0) {
      py::object contiguous = py::module_::import("numpy").attr("ascontiguousarray")(array);
      return torch::utils::tensor_from_numpy(contiguous.ptr());
    }
  }
  return torch::utils::tensor_from_numpy(array.ptr());
}

}  // namespace

PythonCopy::PythonCopy(py::handle data, const std::string& device, const CopyOptions& options) {
  std::vector<at::Tensor> tensors;
  flatten(data, tensors);
  const at::Device target(device);
  // Without the background thread, staging and submission run in start(): without the GIL.
  std::optional<py::gil_scoped_release> unlocked;
  if (!options.use_background_thread) unlocked.emplace();
  copy_ = TensorCopy::start(std::move(tensors), target, options);
}

// Note [dropping a copy with the GIL]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The copy holds a C++ reference to every input and result, and Python holds the other. From torch
// 2.10 on, a tensor that has a Python object takes the GIL whenever its C++ count falls from 2 to 1
// (the C++ side's strong reference to the Python object goes). Dropped without the GIL, each of
// those references took the GIL for itself: 87 us of the 335 us a start_copy of 528 tensors took on
// an H100 host, only to let the handle go. So a copy whose destruction cannot block (its results
// were handed out, or its copies seen to complete) is dropped with the GIL held; only one that must
// still wait for its submission or its copies lets other Python threads run meanwhile.
PythonCopy::~PythonCopy() {
  if (copy_ && copy_->destruction_blocks() && Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release unlocked;
    copy_.reset();
  }
}

void PythonCopy::flatten(py::handle value, std::vector<at::Tensor>& tensors) {
  PyObject* object = value.ptr();
  // A structure that contains itself raises RecursionError, as Python's own walks do.
  if (Py_EnterRecursiveCall(" while walking the structure given to ferry.start_copy") != 0)
    throw py::error_already_set();
  struct Leave {
    ~Leave() { Py_LeaveRecursiveCall(); }
  } leave;
  if (THPVariable_Check(object)) {
    steps_.push_back({Kind::kTensor});
    tensors.push_back(THPVariable_Unpack(object));
  } else if (PyList_CheckExact(object)) {
    const Py_ssize_t size = PyList_GET_SIZE(object);
    steps_.push_back({Kind::kList, size});
    for (Py_ssize_t i = 0; i < size; ++i) flatten(PyList_GET_ITEM(object, i), tensors);
  } else if (PyTuple_CheckExact(object)) {
    const Py_ssize_t size = PyTuple_GET_SIZE(object);
    steps_.push_back({Kind::kTuple, size});
    for (Py_ssize_t i = 0; i < size; ++i) flatten(PyTuple_GET_ITEM(object, i), tensors);
  } else if (PyDict_CheckExact(object)) {
    steps_.push_back({Kind::kDict, PyDict_Size(object)});
    PyObject* key = nullptr;
    PyObject* item = nullptr;
    Py_ssize_t position = 0;
    while (PyDict_Next(object, &position, &key, &item)) {  // insertion order
      steps_.push_back({Kind::kLeaf, 0, py::reinterpret_borrow<py::object>(key)});
      flatten(item, tensors);
    }
  } else if (PyTypeObject* ndarray = numpy_array_type(); ndarray != nullptr && PyObject_TypeCheck(object, ndarray)) {
    steps_.push_back({Kind::kTensor});
    tensors.push_back(array_to_tensor(value));
  } else {
    steps_.push_back({Kind::kLeaf, 0, py::reinterpret_borrow<py::object>(value)});
  }
}

py::object PythonCopy::rebuild(size_t& step, size_t& tensor, const std::vector<at::Tensor>& results) const {
  const Step& here = steps_[step++];
  switch (here.kind) {
    case Kind::kTensor: return py::reinterpret_steal<py::object>(THPVariable_Wrap(results[tensor++]));
    case Kind::kLeaf: return here.object;
    case Kind::kList: {
      py::list list(here.size);
      for (Py_ssize_t i = 0; i < here.size; ++i) list[static_cast<size_t>(i)] = rebuild(step, tensor, results);
      return list;
    }
    case Kind::kTuple: {
      py::tuple tuple(here.size);
      for (Py_ssize_t i = 0; i < here.size; ++i) {
        PyTuple_SET_ITEM(tuple.ptr(), i, rebuild(step, tensor, results).release().ptr());
      }
      return tuple;
    }
    case Kind::kDict: {
      py::dict dict;
      for (Py_ssize_t i = 0; i < here.size; ++i) {
        py::object key = steps_[step++].object;
        dict[key] = rebuild(step, tensor, results);
      }
      return dict;
    }
  }
  throw Error("start_copy: corrupt structure walk");  // unreachable: every kind is handled
}

bool PythonCopy::find_path(size_t& step, size_t& tensor, size_t wanted, std::string& path) const {
  const Step& here = steps_[step++];
  switch (here.kind) {
    case Kind::kTensor: return tensor++ == wanted;
    case Kind::kLeaf: return false;
    case Kind::kList:
    case Kind::kTuple:
      for (Py_ssize_t i = 0; i < here.size; ++i) {
        const size_t length = path.size();
        path += "[" + std::to_string(i) + "]";
        if (find_path(step, tensor, wanted, path)) return true;
        path.resize(length);
      }
      return false;
    case Kind::kDict:
      for (Py_ssize_t i = 0; i < here.size; ++i) {
        const size_t length = path.size();
        path += "[" + py::repr(steps_[step++].object).cast<std::string>() + "]";
        if (find_path(step, tensor, wanted, path)) return true;
        path.resize(length);
      }
      return false;
  }
  return false;
}

py::object PythonCopy::get() {
  const std::vector<at::Tensor>* results = nullptr;
  try {
    py::gil_scoped_release unlocked;
    results = &copy_->wait();  // rethrows the copy's error
  } catch (const Error& e) {
    // Name the tensor by its place in the caller's structure, as C++'s AsyncCopyHandle does.
    const std::optional<size_t> failed = copy_->failed_tensor();
    std::string path;
    size_t step = 0;
    size_t tensor = 0;
    if (!failed || !find_path(step, tensor, *failed, path) || path.empty()) throw;
    throw Error(e.context(), "data" + path + ": " + e.cause());
  }
  // Every call waits (above): each makes the results safe on its own current stream.
  if (result_) return result_;
  size_t step = 0;
  size_t tensor = 0;
  result_ = rebuild(step, tensor, *results);
  return result_;
}

py::dict PythonCopy::plan() const {
  const CopyPlanStats* waited = nullptr;
  {
    py::gil_scoped_release unlocked;  // waits for the submission
    waited = &copy_->plan();
  }
  const CopyPlanStats& plan = *waited;
  py::dict out;
  out["reused"] = plan.reused;
  out["packed"] = plan.packed;
  out["packed_chunks"] = plan.packed_chunks;
  out["staged"] = plan.staged;
  out["direct"] = plan.direct;
  out["chunk_payload_bytes"] = plan.chunk_payload_bytes;
  return out;
}

void bind_copy(py::module_& module) {
  py::class_<PythonCopy>(module, "AsyncCopy", "An in-flight start_copy (use ferry.start_copy).")
      .def("ready", &PythonCopy::ready)
      .def("get", &PythonCopy::get)
      .def("plan", &PythonCopy::plan);
  module.def(
      "start_copy",
      [](py::handle data, const std::string& device, bool use_pinned_staging, bool pack_cpu_tensors,
         size_t min_packed_alignment_bytes, size_t max_packed_chunk_bytes, bool use_background_thread) {
        CopyOptions options;
        options.use_pinned_staging = use_pinned_staging;
        options.pack_cpu_tensors = pack_cpu_tensors;
        options.min_packed_alignment_bytes = min_packed_alignment_bytes;
        options.max_packed_chunk_bytes = max_packed_chunk_bytes;
        options.use_background_thread = use_background_thread;
        return std::make_unique<PythonCopy>(data, device, options);
      },
      py::arg("data"), py::arg("device"), py::arg("use_pinned_staging"), py::arg("pack_cpu_tensors"),
      py::arg("min_packed_alignment_bytes"), py::arg("max_packed_chunk_bytes"), py::arg("use_background_thread"));
}

}  // namespace ferry::python

#include "python_runner.h"

#include <cstring>

#include <ATen/ATen.h>

#include <ferry/io/workers/worker_pool.h>
#include <ferry/pipeline/error.h>

namespace py = pybind11;

namespace ferry::python {
namespace {

using detail::NamedTensors;
using detail::WorkerCall;

/// ferry._worker.InProcess, called from the decode threads with the GIL held. Each array it returns is
/// copied into a tensor of ferry's, so that no tensor of the pipeline needs the GIL to be freed.
class InProcessRunner : public detail::PythonRunner {
 public:
  explicit InProcessRunner(const detail::WorkerSetup& setup) : what_(setup.what) {
    py::gil_scoped_acquire gil;
    // Into a local first: on a failure it is dropped here, with the GIL held, and code_ stays empty.
    try {
      const py::object make = py::module_::import("ferry._worker").attr("InProcess");
      const std::string json = "{\"worker\": 0, " + setup.setup.substr(1);
      py::object code = make(json, setup.payload.empty() ? py::object(py::none()) : py::object(py::bytes(setup.payload)));
      greeting_ = code.attr("greeting")().cast<std::string>();
      code_ = std::move(code);
    } catch (const py::error_already_set& e) {
      throw Error("could not load " + what_ + " in this process: " + e.what());
    } catch (const py::cast_error& e) {
      throw Error("could not load " + what_ + " in this process: " + e.what());
    }
  }

  ~InProcessRunner() override {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      code_ = py::object();
    } else {
      code_.release();  // the interpreter is gone, and its objects with it
    }
  }

  const std::string& greeting() const noexcept override { return greeting_; }
  std::string where() const override { return "the decode threads"; }

  NamedTensors call(const WorkerCall& call, const std::string& sample) override {
    py::gil_scoped_acquire gil;
    py::object result;
    try {
      if (call.op == WorkerCall::Op::kMake) {
        result = code_.attr("make")(call.index, call.epoch);
      } else {
        py::dict inputs;
        for (const auto& [name, tensor] : call.inputs) {
          (void)detail::code_of_dtype(tensor.scalar_type(), name);
          // numpy has no bfloat16: its bits as int16, as a worker process gets them.
          const at::Tensor bits = tensor.scalar_type() == at::kBFloat16 ? tensor.contiguous().view(at::kShort)
                                                                        : tensor.contiguous();
          inputs[py::str(name)] = py::cast(bits).attr("numpy")();
        }
        result = code_.attr("transform")(inputs, call.index, call.epoch);
      }
    } catch (const py::error_already_set& e) {
      throw Error(sample + ": " + e.what());
    }
    if (py::isinstance<py::str>(result)) throw Error("the decode threads: " + result.cast<std::string>());
    NamedTensors out;
    for (const py::handle item : result) {
      const auto entry = item.cast<py::tuple>();
      auto name = entry[0].cast<std::string>();
      const py::buffer_info data = py::buffer(entry[1]).request();  // C-contiguous (ferry._worker makes it so)
      const at::ScalarType dtype = detail::dtype_of_code(entry[2].cast<uint8_t>());
      at::Tensor tensor = at::empty(std::vector<int64_t>(data.shape.begin(), data.shape.end()), at::dtype(dtype));
      if (tensor.nbytes() > 0) std::memcpy(tensor.data_ptr(), data.ptr, tensor.nbytes());
      out.emplace_back(std::move(name), std::move(tensor));
    }
    return out;
  }

 private:
  std::string what_;
  py::object code_;
  std::string greeting_;
};

}  // namespace

void provide_in_process_python() {
  detail::set_in_process_python(
      [](const detail::WorkerSetup& setup) { return std::make_unique<InProcessRunner>(setup); });
}

}  // namespace ferry::python

#include "python_runner.h"

#include <chrono>
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
  size_t processes() const override { return 0; }

  NamedTensors call(const WorkerCall& call, const std::string& sample) override {
    py::gil_scoped_acquire gil;
    // The time the code holds the GIL, which the decode threads share: its busy time.
    const auto started = std::chrono::steady_clock::now();
    calls_.fetch_add(1, std::memory_order_relaxed);
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
      count_busy(started);
      throw Error(sample + ": " + e.what());
    }
    if (py::isinstance<py::str>(result)) {
      count_busy(started);
      throw Error("the decode threads: " + result.cast<std::string>());
    }
    NamedTensors out;
    // The arrays stay referenced by `result` (and their buffers held by `views`) while they are copied
    // without the GIL: other decode threads run Python meanwhile.
    std::vector<py::buffer_info> views;
    for (const py::handle item : result) {
      const auto entry = item.cast<py::tuple>();
      auto name = entry[0].cast<std::string>();
      views.push_back(py::buffer(entry[1]).request());  // C-contiguous (ferry._worker makes it so)
      const py::buffer_info& data = views.back();
      const at::ScalarType dtype = detail::dtype_of_code(entry[2].cast<uint8_t>());
      out.emplace_back(std::move(name),
                       at::empty(std::vector<int64_t>(data.shape.begin(), data.shape.end()), at::dtype(dtype)));
    }
    count_busy(started);
    uint64_t bytes = 0;
    for (const auto& [name, tensor] : out) bytes += tensor.nbytes();
    const auto copy = [&] {
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i].second.nbytes() > 0) std::memcpy(out[i].second.data_ptr(), views[i].ptr, out[i].second.nbytes());
      }
    };
    if (bytes >= kCopyWithoutGil) {
      py::gil_scoped_release released;
      copy();
    } else {
      copy();
    }
    return out;
  }

 private:
  // Copies smaller than this are done with the GIL held: giving it up and taking it again costs more.
  static constexpr uint64_t kCopyWithoutGil = 64 << 10;

  void count_busy(std::chrono::steady_clock::time_point started) {
    busy_ns_.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 std::chrono::steady_clock::now() - started)
                                                 .count()),
                       std::memory_order_relaxed);
  }

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

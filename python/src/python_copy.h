#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/utils/pybind.h>

#include <ferry/copy/copy_options.h>
#include <ferry/copy/tensor_copy.h>

namespace ferry::python {

/// ferry.start_copy's engine: walks a Python structure of list/tuple/dict (exact types; anything else
/// is an opaque leaf), collects its tensors (numpy arrays become tensors sharing their memory) into
/// a TensorCopy — the same core as C++'s ferry::start_copy — and rebuilds the structure around the
/// results in get().
///
/// Tensors are read through torch's own binding (THPVariable_Unpack / THPVariable_Wrap), not
/// DLPack or the array interface: tens of nanoseconds per tensor instead of microseconds.
/// Waiting (get(), a destruction that must still wait for the copies) releases the GIL; a destruction
/// that cannot block keeps it (Note [dropping a copy with the GIL] in the .cpp). Not thread-safe: one owner.
class PythonCopy {
 public:
  /// Starts the copy; called with the GIL held. Throws ferry::Error for invalid options or device.
  PythonCopy(pybind11::handle data, const std::string& device, const CopyOptions& options);
  ~PythonCopy();
  PythonCopy(const PythonCopy&) = delete;
  PythonCopy& operator=(const PythonCopy&) = delete;

  /// Whether the copy has finished (or failed). Never blocks.
  bool ready() const { return copy_->ready(); }
  /// Blocks (GIL released) until done; the input's structure with every tensor copied. Raises the
  /// copy's error as ferry.Error, on every call.
  pybind11::object get();
  /// How the tensors were handled: {"reused", "packed", "packed_chunks", "staged", "direct",
  /// "chunk_payload_bytes"}; after get().
  pybind11::dict plan() const;

 private:
  // The input's shape, in walk order: containers with their sizes, dict keys, leaves passed through,
  // and tensor slots (filled from the results in order).
  enum class Kind { kTensor, kLeaf, kList, kTuple, kDict };
  struct Step {
    Kind kind;
    Py_ssize_t size = 0;      // containers: number of elements (dict: of items)
    pybind11::object object;  // leaves, dict keys
  };
  void flatten(pybind11::handle value, std::vector<at::Tensor>& tensors);
  pybind11::object rebuild(size_t& step, size_t& tensor, const std::vector<at::Tensor>& results) const;
  /// Where the `wanted`-th tensor sits, in Python's indexing syntax ("['x'][0]"); "" for a lone
  /// tensor. Walks steps_ as rebuild() does; needs the GIL (dict keys are shown with repr()).
  bool find_path(size_t& step, size_t& tensor, size_t wanted, std::string& path) const;

  std::vector<Step> steps_;
  std::unique_ptr<TensorCopy> copy_;
  pybind11::object result_;  // rebuilt once, returned by every get()
};

/// Adds ferry._C.start_copy and ferry._C.AsyncCopy to `module`.
void bind_copy(pybind11::module_& module);

}  // namespace ferry::python

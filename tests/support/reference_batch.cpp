#include "tests/support/reference_batch.h"

#include <cstring>
#include <sstream>

#include <ATen/ATen.h>

namespace ferry::testing {

std::vector<std::pair<std::string, at::Tensor>> reference_batch(const SyntheticSource& source,
                                                                const std::vector<uint64_t>& indices,
                                                                const CollateOptions& options) {
  std::vector<std::vector<at::Tensor>> samples;
  for (uint64_t index : indices) samples.push_back(source.expected(index));
  std::vector<std::pair<std::string, at::Tensor>> fields;
  const auto& specs = source.fields();
  for (size_t f = 0; f < specs.size(); ++f) {
    std::vector<at::Tensor> column;
    for (const auto& sample : samples) column.push_back(sample[f]);
    if (!specs[f].variable()) {
      fields.emplace_back(specs[f].name, at::stack(column));
      continue;
    }
    int64_t longest = 0;
    std::vector<int64_t> lengths;
    for (const at::Tensor& t : column) {
      lengths.push_back(t.size(0));
      longest = std::max(longest, t.size(0));
    }
    std::vector<int64_t> shape{static_cast<int64_t>(column.size()), longest};
    for (int64_t d = 1; d < column[0].dim(); ++d) shape.push_back(column[0].size(d));
    const auto custom = options.pad_values.find(specs[f].name);
    const double pad = custom != options.pad_values.end() ? custom->second : options.pad_value;
    at::Tensor padded = at::full(shape, pad, at::TensorOptions().dtype(specs[f].dtype));
    for (size_t s = 0; s < column.size(); ++s) {
      padded[static_cast<int64_t>(s)].narrow(0, 0, lengths[s]).copy_(column[s]);
    }
    fields.emplace_back(specs[f].name, padded);
    fields.emplace_back(specs[f].name + options.lengths_suffix, at::tensor(lengths, at::kLong));
  }
  return fields;
}

std::string compare_with_reference(const Batch& batch, const SyntheticSource& source, const CollateOptions& options) {
  const auto expected = reference_batch(source, batch.sample_indices(), options);
  std::ostringstream problem;
  if (batch.size() != expected.size()) {
    problem << "batch " << batch.sequence() << " has " << batch.size() << " fields, expected " << expected.size();
    return problem.str();
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [name, want] = expected[i];
    if (batch.names()[i] != name) {
      problem << "field " << i << " is '" << batch.names()[i] << "', expected '" << name << "'";
      return problem.str();
    }
    const at::Tensor got = batch.tensors()[i].to(at::kCPU).contiguous();
    if (got.scalar_type() != want.scalar_type() || got.sizes() != want.sizes()) {
      problem << "batch " << batch.sequence() << " field '" << name << "': got " << got.scalar_type() << got.sizes()
              << ", expected " << want.scalar_type() << want.sizes();
      return problem.str();
    }
    const at::Tensor expected_bytes = want.contiguous();
    if (got.nbytes() != 0 && std::memcmp(got.data_ptr(), expected_bytes.data_ptr(), got.nbytes()) != 0) {
      const auto* a = static_cast<const unsigned char*>(got.data_ptr());
      const auto* b = static_cast<const unsigned char*>(expected_bytes.data_ptr());
      size_t at = 0;
      while (a[at] == b[at]) ++at;
      problem << "batch " << batch.sequence() << " field '" << name << "' differs at byte " << at << " of "
              << got.nbytes() << " (got " << int{a[at]} << ", expected " << int{b[at]} << ")";
      return problem.str();
    }
  }
  return "";
}

}  // namespace ferry::testing

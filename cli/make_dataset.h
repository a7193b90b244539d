#pragma once

#include <string_view>
#include <vector>

namespace ferry::cli {

/// `ferry make-dataset KIND OUT [options]`: writes a small dataset to try ferry on, for the demo
/// configs, the tests and the benchmarks (generated, so no large binaries live in the repository).
/// Kinds so far: `tokens` (a Megatron-LM indexed dataset, OUT.bin + OUT.idx). Returns the exit
/// status; throws ferry::Error for I/O failures and std::invalid_argument for bad usage.
int make_dataset(const std::vector<std::string_view>& args);

}  // namespace ferry::cli

// Unified memory without a GPU: every helper refuses with UnifiedMemoryUnsupportedError carrying
// the reason, and the parts that need no device (the byte span of a tensor, describing memory).
// tests/cuda/unified_memory_cuda_test.cpp covers what the helpers do on a GPU.
#include <ferry/pipeline/unified_memory.h>

#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <ferry/build_config.h>
#include <ferry/pipeline/managed_allocator.h>

namespace ferry {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(UnifiedMemory, SupportIsFalseWithAReasonOrTrueWithNone) {
  const UnifiedMemorySupport support = unified_memory_support();
  EXPECT_EQ(support.supported, support.reason.empty()) << support.reason;
  if (!FERRY_WITH_GPU) {
    EXPECT_FALSE(support.supported);
    EXPECT_TRUE(contains(support.reason, "CPU build")) << support.reason;
    EXPECT_TRUE(contains(support.reason, FERRY_BUILD_REASON)) << support.reason;
  }
  // A device number no machine has is never supported, and says which.
  const UnifiedMemorySupport absent = unified_memory_support(4096);
  EXPECT_FALSE(absent.supported);
  EXPECT_FALSE(absent.reason.empty());
}

TEST(UnifiedMemory, WhereUnsupportedEveryHelperThrowsTheReasonFirst) {
  const UnifiedMemorySupport support = unified_memory_support();
  if (support.supported) GTEST_SKIP() << "unified memory works here (the cuda label's test covers it)";
  const at::Tensor cpu = at::arange(16, at::kFloat);
  float host[4] = {1, 2, 3, 4};
  torch::nn::Module module;
  module.register_parameter("weight", at::ones({2, 2}));
  struct Call {
    std::string function;  // expected at the start of the cause
    std::function<void()> run;
  };
  // Each with arguments that would be wrong on a GPU too (host memory, the CPU as accessed-by, a
  // device below -1): the reason unified memory is missing comes first.
  const std::vector<Call> calls = {
      {"", [] { require_unified_memory(0); }},
      {"allocate_managed", [] { (void)allocate_managed(1024, 0); }},
      {"allocate_managed", [] { (void)allocate_managed(0, -1); }},
      {"prefetch_managed", [&] { prefetch_managed(host, sizeof host, 0, nullptr, "host"); }},
      {"prefetch_managed", [&] { prefetch_managed(host, sizeof host, -1, nullptr, "host"); }},
      {"prefetch_managed", [&] { prefetch_managed(host, sizeof host, -7, nullptr, "host"); }},
      {"advise_managed_preferred_location", [&] { advise_managed_preferred_location(host, sizeof host, -1, "host"); }},
      {"advise_managed_accessed_by", [&] { advise_managed_accessed_by(host, sizeof host, -1, "host"); }},
      {"managed_range_attributes", [&] { (void)managed_range_attributes(host, sizeof host); }},
      {"prefetch_managed_tensor", [&] { prefetch_managed_tensor(cpu, 0); }},
      {"prefetch_managed_tensor", [&] { prefetch_managed_tensor(cpu, -1, nullptr, "tensor 'x'"); }},
      {"advise_managed_tensor_preferred_location", [&] { advise_managed_tensor_preferred_location(cpu, 0); }},
      {"advise_managed_tensor_accessed_by", [&] { advise_managed_tensor_accessed_by(cpu, -1); }},
      {"managed_tensor_attributes", [&] { (void)managed_tensor_attributes(cpu); }},
      {"prefetch_managed_module_parameters", [&] { (void)prefetch_managed_module_parameters(module, -1, true); }},
      {"advise_managed_module_parameters_preferred_location",
       [&] { (void)advise_managed_module_parameters_preferred_location(module, 0); }},
      {"ferry::ManagedAllocator", [] { (void)managed_allocator()->allocate(64); }},
      {"empty_managed",
       [] {
         (void)empty_managed({4, 4}, at::kFloat, 0);
       }},
  };
  for (const Call& call : calls) {
    SCOPED_TRACE(call.function);
    try {
      call.run();
      ADD_FAILURE() << call.function << " did not throw";
    } catch (const UnifiedMemoryUnsupportedError& e) {
      const std::string expected =
          (call.function.empty() ? "" : call.function + ": ") + "unified memory is not available: ";
      EXPECT_EQ(e.cause().rfind(expected, 0), 0u) << e.cause();
      // The reason for the current device; device 0 (when it is not the current one) gives the same
      // reason wherever the whole build or machine is the obstacle.
      EXPECT_TRUE(contains(e.cause(), support.reason) || contains(e.cause(), unified_memory_support(0).reason))
          << e.cause();
      EXPECT_TRUE(contains(e.what(), "ferry: ")) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << call.function << " threw something else: " << e.what();
    }
  }
  // And it is a ferry::Error, for code that catches those.
  EXPECT_THROW(require_unified_memory(-1), Error);
  EXPECT_THROW(require_unified_memory(-1, "caller"), UnifiedMemoryUnsupportedError);
}

TEST(UnifiedMemory, ZeroBytesAndNullAreNoOpsThatNeverThrowWhereTheyNeedNoDevice) {
  free_managed(nullptr);
  EXPECT_FALSE(is_managed_memory(nullptr));
  EXPECT_EQ(describe_memory(nullptr), "a null pointer");
  const std::vector<char> host(64);
  EXPECT_FALSE(is_managed_memory(host.data()));
  const std::string where = describe_memory(host.data());
  // With a device: what CUDA says about heap memory; without one: why it cannot say.
  EXPECT_TRUE(where == "pageable host memory (unknown to CUDA)" || contains(where, "cannot describe") ||
              contains(where, "without the CUDA runtime"))
      << where;
}

// The span is checked against the elements' own addresses, over random shapes and views.
TEST(UnifiedMemory, SpanRunsFromTheFirstElementToTheEndOfTheLast) {
  std::mt19937 random(7);
  const at::ScalarType dtypes[] = {at::kByte, at::kShort, at::kFloat, at::kDouble, at::kBFloat16};
  for (int round = 0; round < 200; ++round) {
    std::vector<int64_t> sizes;
    const int dims = static_cast<int>(random() % 4);
    for (int d = 0; d < dims; ++d) sizes.push_back(static_cast<int64_t>(random() % 6) + 1);
    const at::Tensor base = at::empty(sizes, at::TensorOptions().dtype(dtypes[random() % std::size(dtypes)]));
    at::Tensor view = base;
    const int kind = static_cast<int>(random() % 4);
    if (kind == 1 && base.dim() >= 2) view = base.transpose(0, base.dim() - 1);
    if (kind == 2 && base.dim() >= 1 && base.size(0) > 2) view = base.slice(0, 1, base.size(0), 2);
    if (kind == 3 && base.dim() >= 1) view = base.select(0, base.size(0) - 1);
    SCOPED_TRACE(testing::Message() << "sizes " << view.sizes() << " strides " << view.strides());
    const MemorySpan span = memory_span(view);
    EXPECT_EQ(span.pointer, view.data_ptr());
    if (view.is_contiguous()) {
      EXPECT_EQ(span.bytes, view.nbytes());
    }
    // The highest element address, found by flattening the view's own element offsets.
    const auto* first = static_cast<const char*>(view.data_ptr());
    const at::Tensor offsets = at::arange(base.numel(), at::kLong)
                                   .as_strided(view.sizes(), view.strides(), view.storage_offset())
                                   .contiguous();
    const int64_t last = offsets.max().item<int64_t>() - view.storage_offset();
    EXPECT_EQ(first + span.bytes, first + (last + 1) * view.element_size());
  }
  EXPECT_EQ(memory_span(at::empty({0, 3})).bytes, 0u);
  EXPECT_EQ(memory_span(at::Tensor()).bytes, 0u);
  EXPECT_EQ(memory_span(at::Tensor()).pointer, nullptr);
}

}  // namespace
}  // namespace ferry

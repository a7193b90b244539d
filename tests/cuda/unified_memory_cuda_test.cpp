// Unified memory on a GPU: prefetch and advice read back with cudaMemRangeGetAttribute, the module
// helpers' byte counts, refusals of memory that is not managed and of requests larger than the free
// memory, managed tensors, and no leak over many allocations. Skips with the reason where unified
// memory cannot work (tests/pipeline/unified_memory_test.cpp checks the refusals there).
#include <ferry/pipeline/unified_memory.h>

#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <ferry/build_config.h>
#include <ferry/pipeline/cuda_error.h>
#include <ferry/pipeline/cuda_stream.h>
#include <ferry/pipeline/managed_allocator.h>

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {
namespace {

#if FERRY_HAVE_CUDART

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class UnifiedMemoryCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    const UnifiedMemorySupport support = unified_memory_support(0);
    if (!support.supported) GTEST_SKIP() << support.reason;
    FERRY_CUDA_CHECK(cudaSetDevice(0));
  }

  static size_t free_bytes() {
    FERRY_CUDA_CHECK(cudaDeviceSynchronize());
    size_t free = 0;
    size_t total = 0;
    FERRY_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free;
  }

  // The error `run` throws; fails the test when it throws none or another type.
  template <typename Expected, typename Run>
  static std::string message_of(Run run) {
    try {
      run();
    } catch (const UnifiedMemoryUnsupportedError& e) {
      if (!std::is_same_v<Expected, UnifiedMemoryUnsupportedError>) ADD_FAILURE() << "unsupported: " << e.what();
      return e.what();
    } catch (const Expected& e) {
      return e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "another exception: " << e.what();
      return e.what();
    }
    ADD_FAILURE() << "nothing thrown";
    return "";
  }
};

at::Tensor random_floats(int64_t count, uint64_t seed) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  return at::randn({count}, generator, at::TensorOptions().dtype(at::kFloat));
}

TEST_F(UnifiedMemoryCuda, AllocationsAreManagedAndAdvisedForTheirDevice) {
  const size_t bytes = (1 << 20) + 123;
  void* pointer = allocate_managed(bytes, 0, "the test's buffer");
  ASSERT_NE(pointer, nullptr);
  EXPECT_TRUE(is_managed_memory(pointer));
  EXPECT_EQ(describe_memory(pointer), "managed memory");
  const ManagedRangeAttributes attributes = managed_range_attributes(pointer, bytes);
  EXPECT_EQ(attributes.preferred_location, 0);
  EXPECT_EQ(attributes.accessed_by, std::vector<int>{0});
  EXPECT_EQ(attributes.last_prefetch_location, kNoDevice);  // never prefetched
  // The host reads and writes it directly (concurrent managed access).
  std::memset(pointer, 0x5a, bytes);
  EXPECT_EQ(static_cast<unsigned char*>(pointer)[bytes - 1], 0x5a);
  free_managed(pointer);
  EXPECT_EQ(allocate_managed(0, 0), nullptr);
}

TEST_F(UnifiedMemoryCuda, PrefetchMovesToTheDeviceToTheCpuAndBackKeepingTheData) {
  const int64_t count = (4 << 20) / 4 + 17;  // a little over 4 MiB of float32
  const at::Tensor reference = random_floats(count, 1);
  const at::Tensor tensor = empty_managed({count}, at::kFloat, 0);
  ASSERT_TRUE(tensor.is_cuda());
  tensor.copy_(reference);
  CudaStream stream(0);

  prefetch_managed_tensor(tensor, 0, stream.handle(), "tensor 'x'");
  stream.synchronize();
  EXPECT_EQ(managed_tensor_attributes(tensor).last_prefetch_location, 0);
  EXPECT_TRUE(at::equal(tensor.cpu(), reference));

  prefetch_managed_tensor(tensor, kCpuDevice);  // on torch's current stream
  FERRY_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(managed_tensor_attributes(tensor).last_prefetch_location, kCpuDevice);
  // On the host the pages are read in place, at the same address.
  EXPECT_EQ(std::memcmp(tensor.data_ptr(), reference.data_ptr(), reference.nbytes()), 0);

  prefetch_managed(tensor.data_ptr(), tensor.nbytes(), 0, stream.handle(), "the raw range");
  stream.synchronize();
  EXPECT_EQ(managed_range_attributes(tensor.data_ptr(), tensor.nbytes()).last_prefetch_location, 0);
  EXPECT_TRUE(at::equal(tensor.cpu(), reference));
}

TEST_F(UnifiedMemoryCuda, AdviceIsReadBack) {
  const at::Tensor tensor = empty_managed({3, 1000}, at::kFloat, 0);
  advise_managed_tensor_preferred_location(tensor, kCpuDevice);
  EXPECT_EQ(managed_tensor_attributes(tensor).preferred_location, kCpuDevice);
  advise_managed_tensor_preferred_location(tensor, 0);
  EXPECT_EQ(managed_tensor_attributes(tensor).preferred_location, 0);
  advise_managed_tensor_accessed_by(tensor, 0);
  EXPECT_EQ(managed_tensor_attributes(tensor).accessed_by, std::vector<int>{0});
  // A view: its span, from its first element to its last, is what is advised.
  const at::Tensor row = tensor.select(0, 1);
  advise_managed_tensor_preferred_location(row, kCpuDevice);
  EXPECT_EQ(managed_tensor_attributes(row).preferred_location, kCpuDevice);
  // The CPU cannot be an accessed-by device; a number below -1 is no device at all.
  const std::string cpu = message_of<Error>([&] { advise_managed_tensor_accessed_by(tensor, kCpuDevice); });
  EXPECT_TRUE(contains(cpu, "needs a GPU")) << cpu;
  const std::string bad = message_of<Error>([&] { prefetch_managed_tensor(tensor, -3); });
  EXPECT_TRUE(contains(bad, "device -3")) << bad;
}

TEST_F(UnifiedMemoryCuda, MemoryThatIsNotManagedIsRefusedSayingWhereItIs) {
  const at::Tensor cached = at::empty({16}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, 0));
  std::string message = message_of<Error>([&] { prefetch_managed_tensor(cached, 0, std::nullopt, "tensor 'x'"); });
  EXPECT_TRUE(contains(message, "prefetch_managed_tensor")) << message;
  EXPECT_TRUE(contains(message, "tensor 'x' (float32 [16] on cuda:0)")) << message;
  EXPECT_TRUE(contains(message, "device memory on cuda:0")) << message;

  void* raw = nullptr;
  FERRY_CUDA_CHECK(cudaMalloc(&raw, 4096));
  message = message_of<Error>([&] { advise_managed_preferred_location(raw, 4096, 0, "the cudaMalloc buffer"); });
  EXPECT_TRUE(contains(message, "the cudaMalloc buffer is not in managed memory but in device memory on cuda:0"))
      << message;
  FERRY_CUDA_CHECK(cudaFree(raw));

  const at::Tensor cpu = at::zeros({2, 3}, at::kDouble);
  message = message_of<Error>([&] { advise_managed_tensor_accessed_by(cpu, 0, "tensor 'h'"); });
  EXPECT_TRUE(contains(message, "tensor 'h' (float64 [2, 3] on cpu)")) << message;
  EXPECT_TRUE(contains(message, "pageable host memory (unknown to CUDA)")) << message;

  const at::Tensor pinned = at::empty({8}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  message = message_of<Error>([&] { prefetch_managed_tensor(pinned, kCpuDevice); });
  EXPECT_TRUE(contains(message, "pinned host memory")) << message;
}

// Parameters and buffers of a module with a submodule; one parameter in ordinary device memory, one
// registered twice (tied).
struct Block : torch::nn::Module {
  Block() {
    weight = register_parameter("weight", empty_managed({64, 32}, at::kFloat, 0).normal_());
    register_buffer("running_mean", empty_managed({32}, at::kFloat, 0).zero_());
  }
  at::Tensor weight;
};

struct Net : torch::nn::Module {
  Net() {
    block = register_module("block", std::make_shared<Block>());
    bias = register_parameter("bias", empty_managed({7}, at::kDouble, 0).zero_());
    plain = register_parameter("plain", at::zeros({5}, at::TensorOptions().device(at::kCUDA, 0)));
    tied = register_parameter("tied", block->weight);
    register_buffer("steps", empty_managed({3}, at::kLong, 0).zero_());
  }
  std::shared_ptr<Block> block;
  at::Tensor bias, plain, tied;
};

TEST_F(UnifiedMemoryCuda, ModuleHelpersCountTheManagedBytesAndSkipTheRest) {
  Net net;
  const size_t parameters = 64 * 32 * 4 + 7 * 8;  // weight (once, though tied) + bias
  const size_t buffers = 32 * 4 + 3 * 8;

  ManagedModuleResult result = prefetch_managed_module_parameters(net, kCpuDevice);
  EXPECT_EQ(result.bytes, parameters);
  EXPECT_EQ(result.tensors, 2u);
  EXPECT_EQ(result.skipped, 1u);
  EXPECT_EQ(result.skipped_names, std::vector<std::string>{"plain"});
  FERRY_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(managed_tensor_attributes(net.block->weight).last_prefetch_location, kCpuDevice);
  EXPECT_EQ(managed_tensor_attributes(net.bias).last_prefetch_location, kCpuDevice);

  CudaStream stream(0);
  result = prefetch_managed_module_parameters(net, 0, /*include_buffers=*/true, stream.handle());
  stream.synchronize();
  EXPECT_EQ(result.bytes, parameters + buffers);
  EXPECT_EQ(result.tensors, 4u);
  EXPECT_EQ(result.skipped, 1u);
  for (const auto& item : net.named_buffers()) {
    EXPECT_EQ(managed_tensor_attributes(item.value()).last_prefetch_location, 0) << item.key();
  }

  result = advise_managed_module_parameters_preferred_location(net, kCpuDevice, /*include_buffers=*/false);
  EXPECT_EQ(result.bytes, parameters);
  EXPECT_EQ(managed_tensor_attributes(net.bias).preferred_location, kCpuDevice);
  EXPECT_EQ(managed_tensor_attributes(net.block->weight).preferred_location, kCpuDevice);
  // (Buffers are not checked: a small allocation may share a page with a parameter's.)
}

TEST_F(UnifiedMemoryCuda, RequestsLargerThanTheFreeMemoryAreRefusedClearly) {
  const size_t before = free_bytes();
  const size_t asked = before + (size_t{1} << 30);
  const std::string message =
      message_of<ManagedOutOfMemoryError>([&] { (void)allocate_managed(asked, 0, "the test's huge request"); });
  EXPECT_TRUE(contains(message, "the test's huge request")) << message;
  EXPECT_TRUE(contains(message, std::to_string(asked) + " bytes")) << message;
  EXPECT_TRUE(contains(message, "free")) << message;
  EXPECT_TRUE(contains(message, "cuda:0")) << message;
  // Through the c10::Allocator as well, as a ferry::Error.
  const auto elements = static_cast<int64_t>(asked / 4 + 1);
  EXPECT_THROW((void)empty_managed({elements}, at::kFloat, 0), ManagedOutOfMemoryError);
  EXPECT_THROW((void)empty_managed({elements}, at::kFloat, 0), Error);
  EXPECT_NEAR(static_cast<double>(free_bytes()), static_cast<double>(before), 8.0 * (1 << 20));
}

TEST_F(UnifiedMemoryCuda, ManagedTensorsHoldWhatIsWrittenOnEitherSide) {
  std::mt19937 random(3);
  const at::ScalarType dtypes[] = {at::kByte, at::kInt, at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong};
  for (int round = 0; round < 20; ++round) {
    std::vector<int64_t> sizes;
    for (int d = 0, dims = 1 + static_cast<int>(random() % 3); d < dims; ++d) sizes.push_back(1 + random() % 40);
    const at::ScalarType dtype = dtypes[random() % std::size(dtypes)];
    const at::Tensor tensor = empty_managed(sizes, dtype, 0);
    SCOPED_TRACE(testing::Message() << c10::toString(dtype) << " " << tensor.sizes());
    EXPECT_EQ(tensor.device(), at::Device(at::kCUDA, 0));
    EXPECT_TRUE(tensor.is_contiguous());
    EXPECT_TRUE(is_managed_memory(tensor.data_ptr()));
    const at::Tensor reference = (random_floats(tensor.numel(), round) * 50).reshape(sizes).to(dtype);
    tensor.copy_(reference);  // written by CUDA (a copy into the device tensor)
    FERRY_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(std::memcmp(tensor.data_ptr(), reference.data_ptr(), reference.nbytes()), 0);  // read on the host
  }
}

TEST_F(UnifiedMemoryCuda, HundredAllocateFreeCyclesLeakNothing) {
  const size_t bytes = size_t{64} << 20;
  CudaStream stream(0);
  (void)free_bytes();
  // One cycle first: the first managed allocation may set up driver state that stays, and libtorch's
  // first fill_ loads its kernels (96 MB of an H100's memory, for good).
  free_managed(allocate_managed(bytes, 0));
  empty_managed({static_cast<int64_t>(bytes / 4)}, at::kFloat, 0).fill_(0.0f);
  FERRY_CUDA_CHECK(cudaDeviceSynchronize());
  const size_t before = free_bytes();
  for (int cycle = 0; cycle < 100; ++cycle) {
    void* pointer = allocate_managed(bytes, 0);
    prefetch_managed(pointer, bytes, 0, stream.handle(), "cycle buffer");  // make the pages resident
    stream.synchronize();
    free_managed(pointer);
    const at::Tensor tensor = empty_managed({static_cast<int64_t>(bytes / 4)}, at::kFloat, 0);
    tensor.fill_(static_cast<float>(cycle));  // touched on the GPU
  }
  EXPECT_NEAR(static_cast<double>(free_bytes()), static_cast<double>(before), 8.0 * (1 << 20));
}

#else

TEST(UnifiedMemoryCuda, NeedsTheCudaRuntime) { GTEST_SKIP() << "ferry was built without the CUDA runtime"; }

#endif

}  // namespace
}  // namespace ferry

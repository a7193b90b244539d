#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <ferry/build_config.h>
#include <ferry/copy/async_copy_handle.h>
#include <ferry/copy/copy_streams.h>
#include <ferry/copy/retired_copies.h>
#include <ferry/copy/tensor_copy.h>
#include <ferry/pipeline/cuda_device.h>
#include <ferry/pipeline/error.h>
#include "tests/support/random_nested.h"
#include "tests/support/stream_gate.h"

#if FERRY_WITH_GPU
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ferry {
namespace {

#if FERRY_WITH_GPU

class StartCopyCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (" << cuda_unavailable_reason() << ")";
  }
};

at::Device cuda(int index) { return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index)); }

at::Tensor moved(const at::Tensor& tensor, at::Device device) { return tensor.to(device, tensor.scalar_type()); }

// Equal shape, dtype and bytes (NaN-safe: bytes, not values).
::testing::AssertionResult same_bytes(const at::Tensor& expected, const at::Tensor& actual) {
  if (expected.scalar_type() != actual.scalar_type()) {
    return ::testing::AssertionFailure() << "dtype " << actual.scalar_type() << ", expected " << expected.scalar_type();
  }
  if (expected.sizes() != actual.sizes()) {
    return ::testing::AssertionFailure() << "shape " << actual.sizes() << ", expected " << expected.sizes();
  }
  // A fresh contiguous copy: contiguous() keeps odd strides of size-1 dimensions (which .to()
  // preserves from a sliced input), and view(kByte) refuses a last stride other than 1.
  auto bytes = [](const at::Tensor& t) {
    return t.cpu().clone(at::MemoryFormat::Contiguous).reshape({-1}).view(at::kByte);
  };
  if (!at::equal(bytes(expected), bytes(actual))) return ::testing::AssertionFailure() << "different bytes";
  return ::testing::AssertionSuccess();
}

const at::ScalarType kTypes[] = {at::kByte,     at::kShort, at::kInt,    at::kLong, at::kHalf,
                                 at::kBFloat16, at::kFloat, at::kDouble, at::kBool};

// Random values of `dtype` on the CPU (not only zeros: wrong bytes must show).
at::Tensor random_values(std::mt19937& rng, at::IntArrayRef shape, at::ScalarType dtype) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(rng());
  if (dtype == at::kBool) return at::randint(0, 2, shape, generator, at::kLong).to(at::kBool);
  if (at::isIntegralType(dtype, /*includeBool=*/false)) {
    const int64_t low = dtype == at::kByte ? 0 : -120;
    return at::randint(low, 120, shape, generator, at::kLong).to(dtype);
  }
  return at::randn(shape, generator, at::kFloat).to(dtype);
}

struct Draw {
  std::vector<at::Device> devices;  // where inputs may live
  bool allow_large = true;
};

// A tensor of a random dtype and shape (empty and 0-d included, sometimes > 256 KiB), sometimes a
// non-contiguous view (transpose, strided slice, broadcast), sometimes pinned, on a random device.
at::Tensor random_tensor(std::mt19937& rng, const Draw& draw) {
  const at::ScalarType dtype = kTypes[rng() % std::size(kTypes)];
  std::vector<int64_t> shape(rng() % 4);
  for (int64_t& size : shape) size = static_cast<int64_t>(rng() % 7);
  if (draw.allow_large && rng() % 8 == 0) shape = {static_cast<int64_t>(300 + rng() % 200), 150};  // 45 KB .. 2.6 MB
  at::Tensor tensor;
  switch (rng() % 6) {
    case 0:
      if (shape.size() >= 2) {
        tensor = random_values(rng, {shape[1], shape[0]}, dtype).t();
        break;
      }
      [[fallthrough]];
    case 1:
      if (!shape.empty()) {
        std::vector<int64_t> base = shape;
        base[0] = base[0] * 2 + 1;
        tensor = random_values(rng, base, dtype).slice(0, 1, base[0], 2);
        break;
      }
      [[fallthrough]];
    case 2:
      if (!shape.empty() && shape.back() > 0) {
        std::vector<int64_t> one = shape;
        one.back() = 1;
        tensor = random_values(rng, one, dtype).expand(shape);
        break;
      }
      [[fallthrough]];
    default: tensor = random_values(rng, shape, dtype);
  }
  const at::Device device = draw.devices[rng() % draw.devices.size()];
  if (device.is_cuda()) return moved(tensor, device);
  // Contiguous pinned inputs take the "already pinned" route. (A broadcast view cannot be pinned:
  // libtorch's pin_memory() copies into memory laid out with the same zero strides.)
  if (tensor.is_contiguous() && rng() % 5 == 0) return tensor.pin_memory();
  return tensor;
}

Nested random_structure(std::mt19937& rng, const Draw& draw) {
  const testing::NestedLeaves leaves{
      [&] { return random_tensor(rng, draw); },
      [&rng] { return Nested::opaque(std::string("leaf ") + std::to_string(rng() % 100)); }};
  return testing::random_nested(rng, leaves);
}

void expect_same_shape_of_structure(const Nested& a, const Nested& b) {
  ASSERT_EQ(a.kind(), b.kind()) << a.repr() << " vs " << b.repr();
  if (a.is_list() || a.is_tuple()) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) expect_same_shape_of_structure(a[i], b[i]);
  } else if (a.is_dict()) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a.items()[i].first, b.items()[i].first);
      expect_same_shape_of_structure(a.items()[i].second, b.items()[i].second);
    }
  } else if (a.is_opaque()) {
    EXPECT_EQ(std::any_cast<std::string>(a.opaque_value()), std::any_cast<std::string>(b.opaque_value()));
  }
}

// The route Note [how TensorCopy moves a tensor] gives `input`, as CopyPlanStats counts it.
enum class Route { kReused, kPacked, kStaged, kDirect };

Route expected_route(const at::Tensor& input, at::Device target, const CopyOptions& options) {
  if (input.device() == target) return Route::kReused;
  const bool contiguous = input.is_contiguous();
  if (input.is_cpu()) {
    if (options.pack_cpu_tensors && contiguous && input.nbytes() <= kMaxPackedTensorBytes &&
        input.nbytes() <= options.max_packed_chunk_bytes) {
      return Route::kPacked;
    }
    if (!contiguous) return Route::kStaged;
    return options.use_pinned_staging && !input.is_pinned() ? Route::kStaged : Route::kDirect;
  }
  return contiguous ? Route::kDirect : Route::kStaged;
}

// Copies `data` with `options` and checks everything: structure, devices, dtypes, shapes, bytes
// against per-tensor .to(), the plan, pinned D2H results; the results are used on a non-default
// stream of the target right after get().
void check_copy(const Nested& data, at::Device target, const CopyOptions& options, bool delay_copies,
                const std::string& what) {
  SCOPED_TRACE(what);
  const int consumer_device = target.is_cuda() ? target.index() : 0;
  c10::cuda::CUDAStream consumer = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, consumer_device);
  c10::cuda::CUDAStreamGuard on_consumer(consumer);
  if (delay_copies) {
    // ~1 ms of GPU time at the head of ferry's copy stream: a consumer that did not wait for the
    // copies would read unwritten memory.
    const int device = target.is_cuda() ? target.index() : 0;
    c10::cuda::CUDAStreamGuard on_copy_stream(
        c10::cuda::getStreamFromExternal(detail::CopyStreams::stream(device), static_cast<c10::DeviceIndex>(device)));
    at::cuda::sleep(2'000'000);
  }
  AsyncCopyHandle handle = start_copy(data, target, options);
  const Nested result = handle.get();
  // Used at once on the consumer stream (the current one): a clone there is a kernel that reads it.
  const std::vector<at::Tensor> results = result.tensors();
  std::vector<at::Tensor> used;
  for (const at::Tensor& tensor : results) used.push_back(tensor.is_cuda() ? tensor.clone() : tensor);

  expect_same_shape_of_structure(data, result);
  const std::vector<at::Tensor> inputs = data.tensors();
  ASSERT_EQ(results.size(), inputs.size());
  size_t counts[4] = {0, 0, 0, 0};
  size_t packed_bytes = 0;
  const at::Device resolved = target.is_cuda() && !target.has_index() ? cuda(c10::cuda::current_device()) : target;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& input = inputs[i];
    const at::Tensor& output = results[i];
    SCOPED_TRACE("tensor " + std::to_string(i) + ": " + describe_tensor(input));
    EXPECT_EQ(output.device(), resolved);
    const Route route = expected_route(input, resolved, options);
    ++counts[static_cast<int>(route)];
    if (route == Route::kPacked) packed_bytes += input.nbytes();
    if (route == Route::kReused) {
      EXPECT_TRUE(output.is_same(input));
    }
    if (input.is_cuda() && resolved.is_cpu() && output.numel() > 0) {  // no memory, nothing pinned: numel 0
      EXPECT_EQ(output.is_pinned(), options.use_pinned_staging);
    }
    EXPECT_TRUE(same_bytes(moved(input, resolved), used[i]));
    EXPECT_TRUE(same_bytes(input, output));
  }
  const CopyPlanStats& plan = handle.plan();
  EXPECT_EQ(plan.reused, counts[0]);
  EXPECT_EQ(plan.packed, counts[1]);
  EXPECT_EQ(plan.staged, counts[2]);
  EXPECT_EQ(plan.direct, counts[3]);
  EXPECT_EQ(plan.chunk_payload_bytes.size(), plan.packed_chunks);
  EXPECT_EQ(plan.packed_chunks == 0, plan.packed == 0);
  size_t payload = 0;
  for (size_t bytes : plan.chunk_payload_bytes) {
    EXPECT_LE(bytes, options.max_packed_chunk_bytes);
    payload += bytes;
  }
  EXPECT_GE(payload, packed_bytes);
  if (packed_bytes > 0) {
    EXPECT_GE(plan.packed_chunks, (packed_bytes + options.max_packed_chunk_bytes - 1) / options.max_packed_chunk_bytes);
  }
}

std::vector<at::Device> every_device() {
  std::vector<at::Device> devices{at::Device(at::kCPU)};
  for (int d = 0; d < cuda_device_count(); ++d) devices.push_back(cuda(d));
  return devices;
}

// 240 random structures over every option combination, target and input device.
TEST_F(StartCopyCuda, RandomStructuresMatchPerTensorToInEveryDirectionAndOption) {
  std::mt19937 rng(20240601);
  const std::vector<at::Device> devices = every_device();
  const size_t alignments[] = {1, 16, 64, 256};
  for (int round = 0; round < 240; ++round) {
    CopyOptions options;
    options.use_pinned_staging = (round & 1) != 0;
    options.pack_cpu_tensors = (round & 2) != 0;
    options.use_background_thread = (round & 4) != 0;
    options.min_packed_alignment_bytes = alignments[rng() % std::size(alignments)];
    if (round % 3 == 0) options.max_packed_chunk_bytes = 512 + rng() % 8192;  // several chunks
    const at::Device target = round % 5 == 4 ? at::Device(at::kCPU) : devices[1 + rng() % (devices.size() - 1)];
    Draw draw;
    draw.devices = devices;
    const Nested data = random_structure(rng, draw);
    check_copy(data, target, options, round % 4 == 1,
               "round " + std::to_string(round) + " to " + target.str() + ": " + data.repr());
    if (HasFatalFailure()) return;
  }
}

TEST_F(StartCopyCuda, ManySmallTensorsArePackedIntoSeveralChunksWithinTheLimit) {
  std::mt19937 rng(3);
  std::vector<Nested> tensors;
  for (int i = 0; i < 3000; ++i) {
    const at::ScalarType dtype = kTypes[rng() % std::size(kTypes)];
    tensors.emplace_back(random_values(rng, {static_cast<int64_t>(rng() % 40)}, dtype));
  }
  tensors.emplace_back(random_values(rng, {600, 600}, at::kFloat));  // 1.4 MB beside them: not packed
  for (size_t limit : {size_t{4096}, size_t{100'000}, size_t{32} << 20}) {
    for (bool pinned : {true, false}) {
      CopyOptions options;
      options.max_packed_chunk_bytes = limit;
      options.use_pinned_staging = pinned;
      check_copy(Nested::list(tensors), cuda(0), options, true, "limit " + std::to_string(limit));
      AsyncCopyHandle handle = start_copy(Nested::list(tensors), cuda(0), options);
      (void)handle.get();
      EXPECT_EQ(handle.plan().packed, 3000u);
      EXPECT_EQ(handle.plan().staged + handle.plan().direct, 1u);
      if (limit == 4096) {
        EXPECT_GT(handle.plan().packed_chunks, 5u);
      }
      if (limit == (size_t{32} << 20)) {
        EXPECT_EQ(handle.plan().packed_chunks, 1u);
      }
    }
  }
}

// The extremes the options accept, on the GPU path: an alignment of 2^63, alignments that are not
// powers of two, and chunks of 1 byte or of SIZE_MAX. Every value must arrive, whatever the packing
// makes of them.
TEST_F(StartCopyCuda, ExtremePackingOptionsCopyEveryValue) {
  std::mt19937 rng(63);
  Draw draw;
  draw.devices = {at::Device(at::kCPU)};
  // 3, 6, 24 and 100: not powers of two, which multi_tensor_copier accepts (each tensor then starts at the least
  // common multiple of the alignment and its element size).
  for (const size_t alignment : {size_t{1} << 63, size_t{1}, size_t{3}, size_t{6}, size_t{24}, size_t{100}}) {
    for (const size_t limit : {size_t{1}, size_t{7}, size_t{4096}, SIZE_MAX}) {
      CopyOptions options;
      options.min_packed_alignment_bytes = alignment;
      options.max_packed_chunk_bytes = limit;
      for (int round = 0; round < 5; ++round) {
        check_copy(random_structure(rng, draw), cuda(0), options, round % 2 == 0,
                   "alignment " + std::to_string(alignment) + ", chunks of " + std::to_string(limit));
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_F(StartCopyCuda, TensorsAlreadyOnTheTargetAreReturnedAsIs) {
  const at::Tensor on_device = at::arange(10, at::TensorOptions().device(cuda(0)));
  const at::Tensor on_cpu = at::arange(10);
  AsyncCopyHandle to_gpu = start_copy(Nested::list({on_device}), cuda(0));
  EXPECT_TRUE(to_gpu.get()[0].tensor().is_same(on_device));
  AsyncCopyHandle to_cpu = start_copy(Nested::list({on_cpu}), at::kCPU);
  EXPECT_TRUE(to_cpu.get()[0].tensor().is_same(on_cpu));
  EXPECT_EQ(to_gpu.plan().reused + to_cpu.plan().reused, 2u);
}

// Inputs written by kernels still queued on the caller's stream are read after them: the copy
// stream waits on the event start() records there.
TEST_F(StartCopyCuda, InputsWrittenByPendingKernelsAreCopiedAfterThem) {
  c10::cuda::CUDAStream producer = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0);
  c10::cuda::CUDAStreamGuard on_producer(producer);
  for (bool pinned : {true, false}) {
    for (bool background : {true, false}) {
      const at::Tensor source = at::zeros({1 << 20}, at::TensorOptions().device(cuda(0)));
      const at::Tensor strided = at::zeros({512, 512}, at::TensorOptions().device(cuda(0)));
      at::cuda::sleep(5'000'000);  // the fills below run only after this
      source.fill_(7.0);
      strided.fill_(3.0);
      CopyOptions options;
      options.use_pinned_staging = pinned;
      options.use_background_thread = background;
      AsyncCopyHandle handle = start_copy(Nested::list({source, strided.t()}), at::kCPU, options);
      const Nested result = handle.get();
      EXPECT_TRUE(at::equal(result[0].tensor(), at::full({1 << 20}, 7.0)));
      EXPECT_TRUE(at::equal(result[1].tensor(), at::full({512, 512}, 3.0)));
      EXPECT_EQ(result[0].tensor().is_pinned(), pinned);
      EXPECT_TRUE(handle.ready()) << "a CPU result is complete once get() returns";
    }
  }
}

TEST_F(StartCopyCuda, AHandleDroppedRightAfterStartLeavesNothingBroken) {
  std::mt19937 rng(8);
  Draw draw;
  draw.devices = {at::Device(at::kCPU)};
  for (int i = 0; i < 50; ++i) {
    const Nested data = random_structure(rng, draw);
    { AsyncCopyHandle dropped = start_copy(data, cuda(0)); }
    CopyOptions options;
    options.use_background_thread = i % 2 == 0;
    check_copy(data, cuda(0), options, false, "after a dropped handle");
  }
}

// Note [retiring a copy]: a handle destroyed right after get() does not wait on the host; its pinned
// staging must still not be reused before its copy has read it. The copy stream is held back by a
// gate the test opens itself, so every copy is still pending when the next one packs into (freed)
// staging, however loaded the machine is. (A sleep kernel did this before: under eight parallel
// copies of the test it sometimes ran out before the host side was done, and nothing was pending.)
TEST_F(StartCopyCuda, AHandleDroppedAfterGetKeepsItsStagingUntilTheCopyRan) {
  c10::cuda::device_synchronize();
  detail::RetiredCopies::sweep();  // what earlier tests left
  std::vector<at::Tensor> results;
  {
    testing::StreamGate gate;
    gate.hold(detail::CopyStreams::stream(0));
    for (int i = 0; i < 8; ++i) {
      const at::Tensor input = at::full({1 << 20}, static_cast<float>(i));   // 4 MiB: staged, not packed
      const at::Tensor small = at::full({64}, static_cast<float>(i));        // packed
      Nested got = start_copy(Nested::list({input, small}), cuda(0)).get();  // the handle is dropped here
      results.push_back(got[0].tensor());
      results.push_back(got[1].tensor());
    }
    detail::RetiredCopies::sweep();
    EXPECT_EQ(detail::RetiredCopies::pending(), 8u) << "a copy ran while its stream was held";
  }  // opens the gate, and waits for the copy stream
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(at::equal(results[r].cpu(), at::full_like(results[r].cpu(), static_cast<float>(r / 2)))) << r;
  }
  c10::cuda::device_synchronize();
  detail::RetiredCopies::sweep();
  EXPECT_EQ(detail::RetiredCopies::pending(), 0u);
}

// As in multi_tensor_copier: ready() polls without blocking and says whether the copy has completed. With the copy
// stream held by a gate, the copies are submitted (plan() waits for that) but none has run.
TEST_F(StartCopyCuda, ReadyIsFalseWhileTheCopyIsHeldBackAndTrueOnceItRan) {
  c10::cuda::device_synchronize();
  std::optional<AsyncCopyHandle> handle;
  {
    testing::StreamGate gate;
    gate.hold(detail::CopyStreams::stream(0));
    handle.emplace(start_copy(Nested::list({at::full({1 << 20}, 3.0f), at::full({64}, 4.0f)}), cuda(0)));
    EXPECT_FALSE(handle->ready());
    (void)handle->plan();
    EXPECT_FALSE(handle->ready()) << "the copy stream is held: no copy can have run";
  }  // opens the gate, and waits for the copy stream
  EXPECT_TRUE(handle->ready());
  Nested got = handle->get();
  EXPECT_TRUE(at::equal(got[0].tensor().cpu(), at::full({1 << 20}, 3.0f)));
  EXPECT_TRUE(at::equal(got[1].tensor().cpu(), at::full({64}, 4.0f)));
}

TEST_F(StartCopyCuda, ADeviceIndexBeyondTheDevicesThrowsAtStart) {
  EXPECT_THROW(start_copy(at::ones({1}), cuda(cuda_device_count())), Error);
}

TEST_F(StartCopyCuda, CudaWithoutAnIndexMeansTheCurrentDevice) {
  const int last = cuda_device_count() - 1;
  c10::cuda::CUDAGuard on_last(static_cast<c10::DeviceIndex>(last));
  AsyncCopyHandle handle = start_copy(Nested::list({at::ones({3})}), at::Device("cuda"));
  EXPECT_EQ(handle.device(), cuda(last));
  EXPECT_EQ(handle.get()[0].tensor().device(), cuda(last));
}

#else

TEST(StartCopyCuda, NeedsAGpuBuild) { GTEST_SKIP() << "no CUDA device: not a GPU build: " FERRY_BUILD_REASON; }

#endif

}  // namespace
}  // namespace ferry

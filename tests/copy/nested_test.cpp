#include <any>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/copy/async_copy_handle.h>
#include <ferry/copy/nested.h>
#include <ferry/pipeline/cuda_device.h>
#include "tests/support/error_text.h"
#include "tests/support/random_nested.h"

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;

// The same structure: kinds, sizes, dict keys in order, opaque values (ints here) and None; tensors
// are compared by `same_tensor`.
template <typename SameTensor>
void expect_same_structure(const Nested& a, const Nested& b, SameTensor same_tensor, const std::string& at = "data") {
  ASSERT_EQ(a.kind(), b.kind()) << at << ": " << a.repr() << " vs " << b.repr();
  switch (a.kind()) {
    case Nested::Kind::kNone: break;
    case Nested::Kind::kTensor: same_tensor(a.tensor(), b.tensor(), at); break;
    case Nested::Kind::kOpaque:
      ASSERT_EQ(a.opaque_value().type(), b.opaque_value().type()) << at;
      if (a.opaque_value().type() == typeid(int)) {
        EXPECT_EQ(std::any_cast<int>(a.opaque_value()), std::any_cast<int>(b.opaque_value())) << at;
      }
      break;
    case Nested::Kind::kList:
    case Nested::Kind::kTuple:
      ASSERT_EQ(a.size(), b.size()) << at;
      for (size_t i = 0; i < a.size(); ++i) {
        expect_same_structure(a[i], b[i], same_tensor, at + "[" + std::to_string(i) + "]");
      }
      break;
    case Nested::Kind::kDict:
      ASSERT_EQ(a.size(), b.size()) << at;
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a.items()[i].first, b.items()[i].first) << at << ": dict order";
        expect_same_structure(a.items()[i].second, b.items()[i].second, same_tensor,
                              at + "['" + a.items()[i].first + "']");
      }
      break;
  }
}

void expect_identical(const at::Tensor& a, const at::Tensor& b, const std::string& at) {
  EXPECT_TRUE(a.is_same(b)) << at << ": not the same tensor object";
  EXPECT_EQ(a.data_ptr(), b.data_ptr()) << at;
}

TEST(Nested, BuildsAndReadsEveryKind) {
  const at::Tensor t = at::arange(6, at::kFloat).reshape({2, 3});
  const Nested value = Nested::list({t, Nested(), Nested::tuple({Nested::opaque(std::string("label")), t}),
                                     Nested::dict({{"a", t}, {"b", Nested::list()}})});
  ASSERT_TRUE(value.is_list());
  EXPECT_EQ(value.size(), 4u);
  EXPECT_TRUE(value[0].is_tensor());
  EXPECT_TRUE(value[0].tensor().is_same(t));
  EXPECT_TRUE(value[1].is_none());
  EXPECT_TRUE(value[2].is_tuple());
  EXPECT_TRUE(value[2][0].is_opaque());
  EXPECT_EQ(std::any_cast<std::string>(value[2][0].opaque_value()), "label");
  EXPECT_TRUE(value[3].is_dict());
  EXPECT_TRUE(value[3]["a"].tensor().is_same(t));
  EXPECT_EQ(value[3]["b"].size(), 0u);
  EXPECT_EQ(value[3].find("zzz"), nullptr);
  EXPECT_EQ(value.repr(), "[tensor(Float [2, 3] on cpu), None, (<opaque " + std::string(typeid(std::string).name()) +
                              ">, tensor(Float [2, 3] on cpu)), {'a': tensor(Float [2, 3] on cpu), 'b': []}]");
  EXPECT_EQ(Nested::tuple({Nested()}).repr(), "(None,)");
}

TEST(Nested, DictKeepsInsertionOrderAndSetReplacesInPlace) {
  Nested dict = Nested::dict({{"z", at::ones({1})}, {"a", Nested()}, {"m", Nested::opaque(3)}});
  dict.set("a", at::zeros({2})).set("b", Nested());
  std::vector<std::string> keys;
  for (const Nested::Item& item : dict.items()) keys.push_back(item.first);
  EXPECT_EQ(keys, (std::vector<std::string>{"z", "a", "m", "b"}));
  EXPECT_TRUE(dict["a"].is_tensor());
  Nested list = Nested::list();
  list.append(Nested()).append(at::ones({3}));
  EXPECT_EQ(list.size(), 2u);
}

TEST(Nested, RepeatedDictKeyIsAnError) {
  const std::string message = error_of([] { Nested::dict({{"x", Nested()}, {"y", Nested()}, {"x", Nested()}}); });
  EXPECT_TRUE(contains(message, "the key 'x' twice")) << message;
}

TEST(Nested, AccessorsOfTheWrongKindSayWhatWasFound) {
  const Nested list = Nested::list({Nested()});
  EXPECT_TRUE(contains(error_of([&] { (void)list.tensor(); }), "tensor() on a list, not a tensor"));
  EXPECT_TRUE(contains(error_of([&] { (void)list.items(); }), "items() on a list, not a dict"));
  EXPECT_TRUE(contains(error_of([&] { (void)list[3]; }), "index 3 is out of range for a list of 1"));
  EXPECT_TRUE(contains(error_of([&] { (void)Nested::dict()["k"]; }), "no key 'k'"));
  EXPECT_TRUE(contains(error_of([&] { (void)Nested().elements(); }), "elements() on a None"));
  EXPECT_TRUE(contains(error_of([&] { (void)Nested().size(); }), "on a None"));
  EXPECT_TRUE(contains(error_of([&] { Nested(at::ones({1})).append(Nested()); }), "on a tensor"));
}

TEST(Nested, TensorsComeDepthFirstAndPathsSayWhereTheyAre) {
  std::vector<at::Tensor> t;
  for (int i = 0; i < 5; ++i) t.push_back(at::full({1}, i));
  const Nested value = Nested::dict({{"x", t[0]},
                                     {"it's", Nested::list({Nested::tuple({t[1], Nested()}), t[2]})},
                                     {"o", Nested::opaque(1)},
                                     {"y", Nested::dict({{"q", t[3]}})}});
  const std::vector<at::Tensor> found = value.tensors();
  ASSERT_EQ(found.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(found[i].is_same(t[i])) << i;
  EXPECT_EQ(value.tensor_paths(),
            (std::vector<std::string>{"['x']", "['it\\'s'][0][0]", "['it\\'s'][1]", "['y']['q']"}));
  EXPECT_EQ(Nested(t[4]).tensor_paths(), (std::vector<std::string>{""}));
}

TEST(Nested, WithTensorsRebuildsTheSameStructure) {
  const Nested value = Nested::tuple({at::ones({2}), Nested::dict({{"b", at::ones({3})}, {"a", Nested::opaque(5)}}),
                                      Nested::list({Nested(), at::ones({4})})});
  const std::vector<at::Tensor> replacements{at::zeros({7}), at::zeros({8}), at::zeros({9})};
  const Nested rebuilt = value.with_tensors(replacements);
  size_t next = 0;
  expect_same_structure(value, rebuilt, [&](const at::Tensor&, const at::Tensor& b, const std::string& at) {
    EXPECT_TRUE(b.is_same(replacements[next++])) << at;
  });
  EXPECT_EQ(next, 3u);
  EXPECT_TRUE(contains(error_of([&] { value.with_tensors({at::ones({1})}); }), "holds 3 tensors but 1 replacements"));
}

// A random structure of depth <= 3 whose leaves are CPU tensors of random dtypes and shapes, None
// and opaque ints; `opaque` numbers the opaque leaves.
Nested random_structure(std::mt19937& rng, int depth, int& opaque) {
  const testing::NestedLeaves leaves{[&rng] {
                                       static const at::ScalarType kTypes[] = {at::kByte, at::kShort, at::kInt,
                                                                               at::kLong, at::kFloat, at::kDouble,
                                                                               at::kBool};
                                       const at::ScalarType dtype = kTypes[rng() % std::size(kTypes)];
                                       std::vector<int64_t> shape(rng() % 3);
                                       for (int64_t& size : shape) size = static_cast<int64_t>(rng() % 4);
                                       return at::randint(0, 2, shape, at::TensorOptions().dtype(dtype));
                                     },
                                     [&opaque] { return Nested::opaque(opaque++); }};
  return testing::random_nested(rng, leaves, depth);
}

TEST(StartCopy, ToTheCpuReturnsTheSameStructureWithTheSameTensors) {
  std::mt19937 rng(11);
  for (int round = 0; round < 50; ++round) {
    int opaque = 0;
    const Nested data = random_structure(rng, 0, opaque);
    CopyOptions options;
    options.use_background_thread = round % 2 == 0;
    AsyncCopyHandle handle = start_copy(data, at::Device("cpu"), options);
    const Nested result = handle.get();
    expect_same_structure(data, result, expect_identical);
    EXPECT_TRUE(handle.ready());
    EXPECT_EQ(handle.plan().reused, data.tensors().size());
    EXPECT_EQ(handle.plan().packed + handle.plan().staged + handle.plan().direct, 0u);
    expect_same_structure(data, handle.get(), expect_identical);  // again: the same answer
  }
}

TEST(StartCopy, ALoneTensorNoneAndEmptyContainersRoundTrip) {
  const at::Tensor scalar = at::scalar_tensor(3.5);
  EXPECT_TRUE(start_copy(scalar, at::kCPU).get().tensor().is_same(scalar));
  EXPECT_TRUE(start_copy(Nested(), at::kCPU).get().is_none());
  EXPECT_TRUE(start_copy(Nested::list(), at::kCPU).get().is_list());
  EXPECT_TRUE(start_copy(Nested::tuple(), at::kCPU).get().is_tuple());
  EXPECT_TRUE(start_copy(Nested::dict(), at::kCPU).get().is_dict());
  EXPECT_EQ(std::any_cast<int>(start_copy(Nested::opaque(42), at::kCPU).get().opaque_value()), 42);
}

TEST(StartCopy, AFailingTensorIsNamedByItsPlaceInTheStructure) {
  const at::Tensor bad = at::empty({2, 2}, at::TensorOptions().device(at::kMeta));
  const Nested data = Nested::dict({{"a", at::ones({1})}, {"b", Nested::list({at::ones({2}), bad})}});
  AsyncCopyHandle handle = start_copy(data, at::kCPU);
  const std::string message = error_of([&] { handle.get(); });
  EXPECT_TRUE(contains(message,
                       "ferry: copy failed: data['b'][1]: tensor 2 of 3 (Float [2, 2] on meta) to cpu: "
                       "tensors on meta cannot be copied"))
      << message;
  EXPECT_EQ(error_of([&] { handle.get(); }), message) << "every call rethrows";
  EXPECT_TRUE(handle.ready());
}

TEST(StartCopy, ACudaTargetWithoutAGpuFailsAtStartSayingSo) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  for (bool background : {true, false}) {
    CopyOptions options;
    options.use_background_thread = background;
    const std::string message = error_of(
        [&] { start_copy(Nested::list({at::ones({4}), Nested::opaque(1)}), at::Device("cuda"), options); });
    EXPECT_TRUE(contains(message, "cannot copy to cuda: "));
    EXPECT_TRUE(contains(message, "no GPU support") || contains(message, "no CUDA device")) << message;
  }
}

TEST(StartCopy, InvalidTargetOrOptionsThrowAtStart) {
  EXPECT_TRUE(contains(error_of([] { start_copy(at::ones({1}), at::Device("meta")); }),
                       "cannot copy to meta: only cpu and cuda targets are supported"));
  CopyOptions options;
  options.min_packed_alignment_bytes = 0;
  EXPECT_TRUE(contains(error_of([&] { start_copy(at::ones({1}), at::kCPU, options); }),
                       "min_packed_alignment_bytes must be at least 1, got 0"));
}

TEST(StartCopy, AHandleMayBeMovedAndDestroyedBeforeItsCopyIsDone) {
  std::vector<AsyncCopyHandle> handles;
  for (int i = 0; i < 100; ++i) handles.push_back(start_copy(Nested::list({at::ones({i})}), at::kCPU));
  AsyncCopyHandle kept = std::move(handles[7]);
  handles.clear();
  EXPECT_EQ(kept.get()[0].tensor().numel(), 7);
}

class StartCopyThreads : public ::testing::TestWithParam<int> {};

// Several threads start and collect copies at once (the shared copy thread interleaves them); each
// gets its own structure back, and failures stay with the call that caused them.
TEST_P(StartCopyThreads, ConcurrentCallsEachGetTheirOwnResult) {
  const int threads = GetParam();
  std::vector<std::thread> workers;
  std::vector<int> failures(static_cast<size_t>(threads), 0);
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([w, &failures] {
      std::mt19937 rng(static_cast<unsigned>(100 + w));
      for (int round = 0; round < 40; ++round) {
        int opaque = 0;
        Nested data = Nested::list({random_structure(rng, 1, opaque), Nested::opaque(w * 1000 + round)});
        const bool fail = round % 7 == 3;
        if (fail) data.append(at::empty({1}, at::TensorOptions().device(at::kMeta)));
        CopyOptions options;
        options.use_background_thread = round % 3 != 0;
        AsyncCopyHandle handle = start_copy(data, at::kCPU, options);
        if (fail) {
          if (!contains(error_of([&] { handle.get(); }), "on meta cannot be copied"))
            ++failures[static_cast<size_t>(w)];
          continue;
        }
        const Nested result = handle.get();
        if (std::any_cast<int>(result[1].opaque_value()) != w * 1000 + round) ++failures[static_cast<size_t>(w)];
        expect_same_structure(data, result, expect_identical);
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  for (int w = 0; w < threads; ++w) EXPECT_EQ(failures[static_cast<size_t>(w)], 0) << "thread " << w;
}

INSTANTIATE_TEST_SUITE_P(Threads, StartCopyThreads, ::testing::Values(1, 2, 4, 8));

}  // namespace
}  // namespace ferry

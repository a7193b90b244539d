// `ferry make-dataset` as a user runs it: the real binary (FERRY_CLI) as a child process, with its
// stdout and stderr in files, and what it wrote read back with ferry's own readers (TarShardSource,
// JpegDecoder, NpyDecoder, LabelDecoder). Each run has a deadline; a child still running then is
// killed, so a hang fails the test instead of stalling it.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/io/decoders/jpeg_decoder.h>
#include <ferry/io/decoders/label_decoder.h>
#include <ferry/io/decoders/npy_decoder.h>
#include <ferry/io/formats/tar_shard_source.h>
#include "tests/support/error_text.h"
#include "tests/support/temp_dir.h"

extern char** environ;

namespace ferry {
namespace {

using testing::contains;

using testing::TempDir;

struct Result {
  int code = -1;  // the exit status; -1: killed (by a signal or at the deadline)
  std::string out;
  std::string err;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string both(const Result& result) {
  return "\n--- exit " + std::to_string(result.code) + "\n--- stdout ---\n" + result.out + "\n--- stderr ---\n" +
         result.err;
}

// Runs `ferry make-dataset ARGS...` to its end (killed after two minutes), stdout and stderr into
// files (no pipes to fill up), stdin /dev/null.
Result make_dataset(const std::vector<std::string>& args) {
  const TempDir logs("ferry_make_dataset_logs");
  std::vector<std::string> argv = {FERRY_CLI, "make-dataset"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> pointers;
  for (std::string& arg : argv) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, (logs / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, (logs / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  Result result;
  if (spawned != 0) {
    ADD_FAILURE() << "posix_spawn " << argv[0] << " failed: " << spawned;
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "ferry make-dataset still running after 120 s: killed";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_file(logs / "out");
  result.err = read_file(logs / "err");
  return result;
}

// The names in a folder, sorted ("." and ".." left out).
std::vector<std::string> list(const std::string& folder) {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(folder.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

std::string key_of(uint64_t k) {
  char text[24];
  std::snprintf(text, sizeof text, "%06llu", static_cast<unsigned long long>(k));
  return text;
}

std::vector<std::string> shard_paths(const std::string& folder, size_t shards) {
  std::vector<std::string> paths;
  for (size_t s = 0; s < shards; ++s) paths.push_back(folder + "/shard-" + key_of(s) + ".tar");
  return paths;
}

at::Tensor decode_label(const at::Tensor& bytes) {
  return LabelDecoder().decode(bytes, FieldSpec{"label", at::kLong, {}, std::nullopt, "label"});
}

// Expects exactly `shards` shard files (nothing else, nothing .partial) holding `samples` samples
// split as the documented rule says, each with the payload field and a .cls of k % classes.
// Returns the source, whose field 0 is the payload and field 1 the label.
TarShardSource expect_shards(const std::string& folder, uint64_t samples, size_t shards, uint64_t classes,
                             const TarField& payload) {
  std::vector<std::string> expected_names;
  for (size_t s = 0; s < shards; ++s) expected_names.push_back("shard-" + key_of(s) + ".tar");
  EXPECT_EQ(list(folder), expected_names);
  for (const std::string& path : shard_paths(folder, shards)) EXPECT_EQ(read_file(path).size() % 10240, 0u) << path;
  TarShardSource source(
      {shard_paths(folder, shards), {payload, TarField{"label", "cls", at::kLong, {}, std::nullopt, "label"}}});
  EXPECT_EQ(source.size(), samples);
  EXPECT_EQ(source.shard_count(), shards);
  uint64_t begin = 0;
  for (size_t s = 0; s < source.shard_count(); ++s) {
    // The first samples % shards shards hold one sample more; all are consecutive.
    const uint64_t size = samples / shards + (s < samples % shards ? 1 : 0);
    EXPECT_EQ(source.shard_samples(s).begin, begin) << "shard " << s;
    EXPECT_EQ(source.shard_samples(s).size(), size) << "shard " << s;
    begin += size;
  }
  for (uint64_t k = 0; k < source.size(); ++k) {
    const EncodedSample sample = source.read(k);
    EXPECT_EQ(sample.key.substr(sample.key.size() - 6), key_of(k));
    EXPECT_EQ(decode_label(sample.fields.at(1)).item<int64_t>(), static_cast<int64_t>(k % classes)) << "sample " << k;
  }
  return source;
}

// ---- tar ---------------------------------------------------------------------------------------------

TEST(MakeDataset, TarShardsHoldJpegsOfTheAskedSizeAndLabelsKModClasses) {
  const TempDir dir("ferry_make_dataset");
  const std::string out = dir / "shards";
  const Result result = make_dataset(
      {"tar", out, "--samples", "23", "--shards", "4", "--image-size", "48x64", "--classes", "5", "--seed", "3"});
  ASSERT_EQ(result.code, 0) << both(result);
  EXPECT_TRUE(contains(result.out, "wrote 23 samples to " + out)) << both(result);
  EXPECT_TRUE(contains(result.out, "4 tar shards")) << both(result);
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), 1) << both(result);
  const TarShardSource source = expect_shards(out, 23, 4, 5, TarField{"image", "jpg"});
  const JpegDecoder decoder;
  std::set<std::string> distinct;
  for (uint64_t k = 0; k < source.size(); ++k) {
    const at::Tensor image =
        decoder.decode(source.read(k).fields.at(0), FieldSpec{"image", at::kByte, {48, 64, 3}, std::nullopt, "jpeg"});
    ASSERT_EQ(image.sizes(), (std::vector<int64_t>{48, 64, 3}));
    // Not flat: a picture, with edges and texture.
    EXPECT_GT(image.to(at::kFloat).std().item<float>(), 10.0f) << "sample " << k;
    distinct.insert(
        std::string(reinterpret_cast<const char*>(image.data_ptr<uint8_t>()), static_cast<size_t>(image.numel())));
  }
  EXPECT_EQ(distinct.size(), 23u);
}

TEST(MakeDataset, DefaultImagesAre256SquareAndCompressLikePhotos) {
  const TempDir dir("ferry_make_dataset");
  const std::string out = dir / "shards";
  const Result result = make_dataset({"tar", out, "--samples", "12"});
  ASSERT_EQ(result.code, 0) << both(result);
  // The default 4 shards: 3 samples each.
  const TarShardSource source = expect_shards(out, 12, 4, 10, TarField{"image", "jpg"});
  for (uint64_t k = 0; k < source.size(); ++k) {
    const at::Tensor jpeg = source.read(k).fields.at(0);
    // Realistic JPEG sizes for 256x256 at quality 90: neither flat (a few KB) nor noise (~150 KB).
    EXPECT_GT(jpeg.numel(), 8000) << "sample " << k;
    EXPECT_LT(jpeg.numel(), 45000) << "sample " << k;
    EXPECT_EQ(JpegDecoder().decode(jpeg, FieldSpec{"image", at::kByte, {256, 256, 3}, std::nullopt, "jpeg"}).size(0),
              256);
  }
  // Quality 30 makes smaller files of the same pictures.
  const std::string low = dir / "low";
  ASSERT_EQ(make_dataset({"tar", low, "--samples", "12", "--quality", "30"}).code, 0);
  EXPECT_LT(read_file(low + "/shard-000000.tar").size(), read_file(out + "/shard-000000.tar").size());
}

// ---- npy ---------------------------------------------------------------------------------------------

TEST(MakeDataset, NpyShardsHoldFloat32VectorsThatSeparateTheClasses) {
  const TempDir dir("ferry_make_dataset");
  const std::string out = dir / "npy";
  const Result result = make_dataset({"npy", out, "--samples", "60", "--shards", "7", "--classes", "4"});
  ASSERT_EQ(result.code, 0) << both(result);
  EXPECT_TRUE(contains(result.out, "wrote 60 samples to " + out)) << both(result);
  const TarShardSource source = expect_shards(out, 60, 7, 4, TarField{"x", "npy"});
  const NpyDecoder decoder;
  std::vector<at::Tensor> rows;
  for (uint64_t k = 0; k < source.size(); ++k) {
    const at::Tensor x =
        decoder.decode(source.read(k).fields.at(0), FieldSpec{"x", at::kFloat, {64}, std::nullopt, "npy"});
    ASSERT_TRUE(x.isfinite().all().item<bool>());
    rows.push_back(x);
  }
  // Learnable: each sample is nearer its own class's mean than any other class's.
  const at::Tensor features = at::stack(rows);
  const at::Tensor labels = at::arange(60, at::kLong).remainder(4);
  std::vector<at::Tensor> means;
  for (int64_t c = 0; c < 4; ++c) means.push_back(features.index_select(0, (labels == c).nonzero().squeeze(1)).mean(0));
  const at::Tensor nearest = at::cdist(features, at::stack(means)).argmin(1);
  EXPECT_TRUE(nearest.equal(labels));
}

TEST(MakeDataset, NpyDefaultsAreAThousandSamplesInFourShards) {
  const TempDir dir("ferry_make_dataset");
  const Result result = make_dataset({"npy", dir / "npy"});
  ASSERT_EQ(result.code, 0) << both(result);
  EXPECT_TRUE(contains(result.out, "1000 samples")) << both(result);
  expect_shards(dir / "npy", 1000, 4, 10, TarField{"x", "npy"});
}

// ---- images ------------------------------------------------------------------------------------------

TEST(MakeDataset, ImageFolderHasAClassFolderPerLabelAndEveryFileDecodes) {
  const TempDir dir("ferry_make_dataset");
  const std::string out = dir / "images/nested";  // parents are created
  const Result result = make_dataset({"images", out, "--samples", "25", "--classes", "4", "--image-size", "40"});
  ASSERT_EQ(result.code, 0) << both(result);
  EXPECT_TRUE(contains(result.out, "wrote 25 images to " + out)) << both(result);
  EXPECT_EQ(list(out), (std::vector<std::string>{"class-000", "class-001", "class-002", "class-003"}));
  const JpegDecoder decoder;
  uint64_t files = 0;
  for (uint64_t c = 0; c < 4; ++c) {
    const std::string folder = out + "/class-" + key_of(c).substr(3);
    std::vector<std::string> expected;
    for (uint64_t k = c; k < 25; k += 4) expected.push_back(key_of(k) + ".jpg");
    EXPECT_EQ(list(folder), expected) << folder;
    for (const std::string& name : list(folder)) {
      const std::string bytes = read_file(folder + "/" + name);
      at::Tensor encoded = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
      std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(encoded.data_ptr<uint8_t>()));
      EXPECT_EQ(decoder.decode(encoded, FieldSpec{"image", at::kByte, {40, 40, 3}, std::nullopt, "jpeg"}).size(1), 40);
      ++files;
    }
  }
  EXPECT_EQ(files, 25u);
}

// A baseline JPEG's (height, width), read from its SOF0 segment.
std::pair<int64_t, int64_t> jpeg_size(const at::Tensor& encoded) {
  const uint8_t* bytes = encoded.data_ptr<uint8_t>();
  for (int64_t i = 2; i + 8 < encoded.numel();) {
    if (bytes[i] != 0xFF) break;
    const int marker = bytes[i + 1];
    if (marker == 0xC0) return {bytes[i + 5] * 256 + bytes[i + 6], bytes[i + 7] * 256 + bytes[i + 8]};
    i += 2 + bytes[i + 2] * 256 + bytes[i + 3];
  }
  ADD_FAILURE() << "no SOF0 segment";
  return {0, 0};
}

TEST(MakeDataset, ImagenetSizesAreMostly500By375AndRepeat) {
  const TempDir dir("ferry_make_dataset");
  const std::string out = dir / "imagenet";
  const Result result = make_dataset({"images", out, "--samples", "40", "--classes", "1", "--image-size", "imagenet"});
  ASSERT_EQ(result.code, 0) << both(result);
  EXPECT_TRUE(contains(result.out, "jpg ImageNet-like sizes, mostly 500x375 q90")) << both(result);
  std::map<std::pair<int64_t, int64_t>, int> sizes;
  for (const std::string& name : list(out + "/class-000")) {
    const std::string bytes = read_file(out + "/class-000/" + name);
    at::Tensor encoded = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
    std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(encoded.data_ptr<uint8_t>()));
    // Any size: resized so that the shorter side is 300, then the central 300 x 300.
    const JpegDecoder decoder(JpegDecodeOptions{300, 300, 300});
    EXPECT_EQ(decoder.decode(encoded, FieldSpec{"image", at::kByte, {300, 300, 3}, std::nullopt, "jpeg"}).size(0), 300);
    ++sizes[jpeg_size(encoded)];
  }
  EXPECT_GT(sizes.size(), 1u) << "one size for 40 images";
  using Size = std::pair<int64_t, int64_t>;
  const std::set<Size> known = {Size{375, 500}, Size{333, 500}, Size{500, 375}, Size{500, 333}};
  for (const auto& [size, count] : sizes) {
    EXPECT_EQ(known.count(size), 1u) << size.first << "x" << size.second;
  }
  EXPECT_GE(sizes[(Size{375, 500})], 20) << "mostly landscape 500 x 375";
}

TEST(MakeDataset, ImageFolderMakesOnlyClassesThatHaveSamples) {
  const TempDir dir("ferry_make_dataset");
  ASSERT_EQ(make_dataset({"images", dir / "few", "--samples", "3", "--image-size", "16"}).code, 0);
  EXPECT_EQ(list(dir / "few"), (std::vector<std::string>{"class-000", "class-001", "class-002"}));
}

TEST(MakeDataset, TarAndImagesGiveSampleKTheSameLabelAndPixels) {
  const TempDir dir("ferry_make_dataset");
  const std::vector<std::string> common = {"--samples", "9", "--classes", "3", "--image-size", "32", "--seed", "5"};
  std::vector<std::string> tar_args = {"tar", dir / "tar", "--shards", "2"};
  std::vector<std::string> image_args = {"images", dir / "images"};
  tar_args.insert(tar_args.end(), common.begin(), common.end());
  image_args.insert(image_args.end(), common.begin(), common.end());
  ASSERT_EQ(make_dataset(tar_args).code, 0);
  ASSERT_EQ(make_dataset(image_args).code, 0);
  const TarShardSource source(
      {shard_paths(dir / "tar", 2),
       {TarField{"image", "jpg"}, TarField{"label", "cls", at::kLong, {}, std::nullopt, "label"}}});
  for (uint64_t k = 0; k < 9; ++k) {
    const at::Tensor in_tar = source.read(k).fields.at(0);
    const std::string in_folder =
        read_file(dir / ("images/class-00" + std::to_string(k % 3) + "/" + key_of(k) + ".jpg"));
    EXPECT_EQ(
        std::string(reinterpret_cast<const char*>(in_tar.data_ptr<uint8_t>()), static_cast<size_t>(in_tar.numel())),
        in_folder)
        << "sample " << k;
  }
}

// ---- determinism -------------------------------------------------------------------------------------

// Every file under `folder` (one level of subfolders), path -> bytes.
std::vector<std::pair<std::string, std::string>> contents(const std::string& folder) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const std::string& name : list(folder)) {
    struct stat info {};
    ::stat((folder + "/" + name).c_str(), &info);
    if (S_ISDIR(info.st_mode)) {
      for (const std::string& inner : list(folder + "/" + name))
        files.emplace_back(name + "/" + inner, read_file(folder + "/" + name + "/" + inner));
    } else {
      files.emplace_back(name, read_file(folder + "/" + name));
    }
  }
  return files;
}

TEST(MakeDataset, SameArgumentsGiveTheSameBytesAndAnotherSeedOthers) {
  const TempDir dir("ferry_make_dataset");
  const std::vector<std::vector<std::string>> kinds = {
      {"tar", "--samples", "10", "--shards", "3", "--image-size", "24x40"},
      {"npy", "--samples", "10", "--shards", "3"},
      {"images", "--samples", "10", "--image-size", "24", "--classes", "3"},
  };
  for (const std::vector<std::string>& kind : kinds) {
    SCOPED_TRACE(kind[0]);
    const auto run = [&](const std::string& name, const std::string& seed) {
      std::vector<std::string> args = {kind[0], dir / name};
      args.insert(args.end(), kind.begin() + 1, kind.end());
      args.insert(args.end(), {"--seed", seed});
      const Result result = make_dataset(args);
      EXPECT_EQ(result.code, 0) << both(result);
      return contents(dir / name);
    };
    const auto first = run(kind[0] + "-a", "7");
    const auto second = run(kind[0] + "-b", "7");
    const auto other = run(kind[0] + "-c", "8");
    ASSERT_FALSE(first.empty());
    EXPECT_TRUE(first == second);
    ASSERT_EQ(first.size(), other.size());
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_EQ(first[i].first, other[i].first);
      EXPECT_NE(first[i].second, other[i].second) << first[i].first;
    }
  }
}

// ---- usage -------------------------------------------------------------------------------------------

TEST(MakeDataset, BadUsageExitsTwoNamingTheProblemAndWritesNothing) {
  const TempDir dir("ferry_make_dataset");
  const std::string fresh = dir / "fresh";
  const std::string full = dir / "full";
  ASSERT_EQ(::mkdir(full.c_str(), 0755), 0);
  std::ofstream(full + "/keep.txt") << "mine";
  const std::string file = dir / "file";
  std::ofstream(file) << "a file";
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> named;  // what stderr must mention
  };
  const std::vector<Case> cases = {
      {{"tar", fresh, "--bogus", "1"}, {"unknown option '--bogus'"}},
      {{"tar", fresh, "--shards", "0"}, {"--shards", "found 0"}},
      {{"tar", fresh, "--samples", "5", "--shards", "6"}, {"--shards", "1..5", "found 6"}},
      {{"npy", fresh, "--shards", "0"}, {"--shards"}},
      {{"tar", fresh, "--samples", "0"}, {"--samples"}},
      {{"tar", fresh, "--samples", "5", "--samples", "6"}, {"--samples is given twice"}},
      {{"images", fresh, "--seed=1", "--seed", "2"}, {"--seed is given twice"}},
      {{"tar", fresh, "--samples", "ten"}, {"--samples", "'ten'"}},
      {{"tar", fresh, "--samples"}, {"--samples needs a value"}},
      {{"tar", fresh, "--image-size", "4"}, {"--image-size", "8..8192", "'4'"}},
      {{"images", fresh, "--image-size", "9000"}, {"--image-size", "'9000'"}},
      {{"tar", fresh, "--image-size", "32x"}, {"--image-size", "'32x'"}},
      {{"tar", fresh, "--quality", "0"}, {"--quality", "1..100"}},
      {{"images", fresh, "--quality", "101"}, {"--quality", "101"}},
      {{"tar", fresh, "--classes", "0"}, {"--classes"}},
      {{"npy", fresh, "--image-size", "32"}, {"--image-size is not an option of make-dataset npy", "--samples"}},
      {{"images", fresh, "--shards", "2"}, {"--shards is not an option of make-dataset images"}},
      {{"tar", fresh, "extra"}, {"unexpected argument 'extra'"}},
      {{"tar", full}, {full, "not empty", "keep.txt"}},
      {{"images", full + "/"}, {full, "not empty"}},
      {{"npy", file}, {file, "not a folder"}},
      {{"tar", file + "/inside"}, {file + "/inside"}},
      {{"tar"}, {"needs an OUT_DIR"}},
      {{"bogus", fresh}, {"unknown dataset kind 'bogus'", "tar", "npy", "images"}},
      {{}, {"needs a KIND"}},
  };
  for (const Case& c : cases) {
    std::string command = "ferry make-dataset";
    for (const std::string& arg : c.args) command += " " + arg;
    SCOPED_TRACE(command);
    const Result result = make_dataset(c.args);
    EXPECT_EQ(result.code, 2) << both(result);
    for (const std::string& part : c.named)
      EXPECT_TRUE(contains(result.err, part)) << "stderr does not name '" << part << "'" << both(result);
    EXPECT_TRUE(result.out.empty()) << "a usage error printed on stdout" << both(result);
    EXPECT_FALSE(exists(fresh)) << "a usage error created OUT_DIR";
  }
  EXPECT_EQ(list(full), std::vector<std::string>{"keep.txt"});
  EXPECT_EQ(read_file(full + "/keep.txt"), "mine");
}

TEST(MakeDataset, TokensRefusesADatasetThatIsThereAlready) {
  const TempDir dir("ferry_make_dataset");
  const std::string prefix = dir / "tokens";
  const Result first = make_dataset({"tokens", prefix, "--documents", "5"});
  ASSERT_EQ(first.code, 0) << both(first);
  const std::string bin = read_file(prefix + ".bin");
  const std::string idx = read_file(prefix + ".idx");
  const Result again = make_dataset({"tokens", prefix, "--documents", "9", "--seed", "7"});
  EXPECT_EQ(again.code, 2) << both(again);
  EXPECT_TRUE(contains(again.err, prefix + ".bin exists")) << both(again);
  EXPECT_TRUE(contains(again.err, "choose another OUT")) << both(again);
  EXPECT_EQ(read_file(prefix + ".bin"), bin) << "the dataset was overwritten";
  EXPECT_EQ(read_file(prefix + ".idx"), idx) << "the dataset was overwritten";
  // Half a dataset is refused too.
  ::unlink((prefix + ".bin").c_str());
  const Result half = make_dataset({"tokens", prefix});
  EXPECT_EQ(half.code, 2) << both(half);
  EXPECT_TRUE(contains(half.err, prefix + ".idx exists")) << both(half);
}

TEST(MakeDataset, AnEmptyExistingFolderIsFine) {
  const TempDir dir("ferry_make_dataset");
  ASSERT_EQ(::mkdir((dir / "empty").c_str(), 0755), 0);
  const Result result = make_dataset({"npy", dir / "empty", "--samples", "3", "--shards", "3"});
  ASSERT_EQ(result.code, 0) << both(result);
  EXPECT_EQ(list(dir / "empty").size(), 3u);
}

}  // namespace
}  // namespace ferry

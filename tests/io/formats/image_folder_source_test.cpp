// ImageFolderSource: torchvision's ImageFolder layout (root/<class>/<file>), classes in name order,
// files in path order, the file's bytes as read at read() time, the class index as an int64 scalar.
#include <ferry/io/formats/image_folder_source.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/io/decoders/decoder_registry.h>
#include <ferry/io/decoders/jpeg_decoder.h>
#include <ferry/io/decoders/jpeg_encoder.h>
#include <ferry/pipeline/error.h>
#include "tests/support/error_text.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tensor_bytes.h"

namespace ferry {
namespace {

using testing::error_of;

using testing::TempDir;
using testing::text_of;

// Writes `bytes` to root/relative, creating the folders on the way.
void write_file(const std::string& root, const std::string& relative, const std::string& bytes) {
  for (size_t slash = relative.find('/'); slash != std::string::npos; slash = relative.find('/', slash + 1)) {
    ::mkdir((root + "/" + relative.substr(0, slash)).c_str(), 0755);
  }
  std::ofstream out(root + "/" + relative, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << relative;
}

std::string random_bytes(std::mt19937_64& rng, size_t max_size = 3000) {
  std::string bytes(rng() % max_size + 1, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

ImageFolderOptions options_for(const std::string& root) {
  ImageFolderOptions options;
  options.root = root;
  return options;
}

TEST(ImageFolderSource, NumbersClassesInNameOrderAndSamplesClassByClass) {
  const TempDir dir("ferry_image_folder");
  std::mt19937_64 rng(11);
  // Byte order: upper case before lower case, "class10" before "class2".
  const std::vector<std::string> classes{"class2", "class10", "bird", "Zebra", "cat"};
  std::map<std::string, std::string> written;  // relative path -> bytes
  for (const std::string& name : classes) {
    const int files = static_cast<int>(rng() % 4) + 1;
    for (int f = 0; f < files; ++f) {
      const std::string path = name + "/" + std::to_string(rng() % 100000) + ".jpg";
      written[path] = random_bytes(rng);
      write_file(dir.path(), path, written[path]);
    }
  }
  const ImageFolderSource source(options_for(dir.path()));
  const std::vector<std::string> sorted_classes{"Zebra", "bird", "cat", "class10", "class2"};
  EXPECT_EQ(source.class_names(), sorted_classes);
  ASSERT_EQ(source.size(), written.size());
  // std::map orders the paths as the source must: by class name, then by path in the class.
  uint64_t index = 0;
  for (const auto& [path, bytes] : written) {
    SCOPED_TRACE(path);
    const EncodedSample sample = source.read(index);
    EXPECT_EQ(sample.index, index);
    EXPECT_EQ(sample.key, path);
    ASSERT_EQ(sample.fields.size(), 2u);
    EXPECT_EQ(sample.fields[0].scalar_type(), at::kByte);
    EXPECT_EQ(sample.fields[0].dim(), 1);
    EXPECT_EQ(text_of(sample.fields[0]), bytes);
    const std::string class_name = path.substr(0, path.find('/'));
    const auto expected_label =
        std::find(sorted_classes.begin(), sorted_classes.end(), class_name) - sorted_classes.begin();
    EXPECT_EQ(sample.fields[1].scalar_type(), at::kLong);
    EXPECT_EQ(sample.fields[1].dim(), 0);
    EXPECT_EQ(sample.fields[1].item<int64_t>(), expected_label);
    EXPECT_EQ(source.label(index), expected_label);
    ++index;
  }
  EXPECT_EQ(source.describe(),
            "image_folder(" + dir.path() + ", 5 classes, " + std::to_string(written.size()) + " samples)");
}

TEST(ImageFolderSource, DeclaresTheImageSpecAndAnInt64LabelTheRawDecoderPassesOn) {
  const TempDir dir("ferry_image_folder");
  write_file(dir.path(), "a/0.jpg", "x");
  ImageFolderOptions options = options_for(dir.path());
  options.image.shape = {16, 24, 3};
  options.image.decoder = "jpeg";
  const ImageFolderSource source(options);
  ASSERT_EQ(source.fields().size(), 2u);
  const FieldSpec& image = source.fields()[0];
  EXPECT_EQ(image.name, "image");
  EXPECT_EQ(image.dtype, at::kByte);
  EXPECT_EQ(image.shape, (std::vector<int64_t>{16, 24, 3}));
  EXPECT_EQ(image.decoder, "jpeg");
  const FieldSpec& label = source.fields()[1];
  EXPECT_EQ(label.name, "label");
  EXPECT_EQ(label.dtype, at::kLong);
  EXPECT_TRUE(label.shape.empty());
  EXPECT_EQ(label.decoder, "raw");
  const at::Tensor decoded = DecoderRegistry::global().find("raw")->decode(source.read(0).fields[1], label);
  EXPECT_EQ(decoded.scalar_type(), at::kLong);
  EXPECT_EQ(decoded.dim(), 0);
  EXPECT_EQ(decoded.item<int64_t>(), 0);

  // The default image spec: the bytes as stored, of any length.
  const ImageFolderSource plain(options_for(dir.path()));
  EXPECT_TRUE(plain.fields()[0].variable());
  EXPECT_EQ(plain.fields()[0].decoder, "raw");
}

TEST(ImageFolderSource, FindsFilesInNestedFoldersSortedByPathWithinTheClass) {
  const TempDir dir("ferry_image_folder");
  const std::vector<std::string> files{"dog/z.jpg",   "dog/a/b/c.jpg",      "dog/a/a.jpg", "dog/a-b.jpg",
                                       "dog/b/0.jpg", "cat/deep/er/x.jpeg", "cat/m.jpg"};
  for (const std::string& file : files) write_file(dir.path(), file, file);
  const ImageFolderSource source(options_for(dir.path()));
  // Byte order of the paths relative to the class folder: '-' (0x2d) < '/' (0x2f) < letters.
  const std::vector<std::string> expected{"cat/deep/er/x.jpeg", "cat/m.jpg",   "dog/a-b.jpg", "dog/a/a.jpg",
                                          "dog/a/b/c.jpg",      "dog/b/0.jpg", "dog/z.jpg"};
  ASSERT_EQ(source.size(), expected.size());
  for (uint64_t i = 0; i < source.size(); ++i) {
    const EncodedSample sample = source.read(i);
    EXPECT_EQ(sample.key, expected[i]);
    EXPECT_EQ(text_of(sample.fields[0]), expected[i]);
    EXPECT_EQ(sample.fields[1].item<int64_t>(), i < 2 ? 0 : 1);
  }
}

TEST(ImageFolderSource, CountsOnlyTheExtensionsAskedForWhateverTheirCase) {
  const TempDir dir("ferry_image_folder");
  for (const char* file :
       {"c/a.JPG", "c/b.Jpeg", "c/c.jpg", "c/d.png", "c/e.txt", "c/jpg", "c/f.jpg.txt", "c/g.PNG", "c/h.xjpg"}) {
    write_file(dir.path(), file, file);
  }
  const ImageFolderSource jpegs(options_for(dir.path()));
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < jpegs.size(); ++i) keys.push_back(jpegs.read(i).key);
  EXPECT_EQ(keys, (std::vector<std::string>{"c/a.JPG", "c/b.Jpeg", "c/c.jpg"}));

  ImageFolderOptions options = options_for(dir.path());
  options.extensions = {".Png", "TXT"};
  const ImageFolderSource others(options);
  keys.clear();
  for (uint64_t i = 0; i < others.size(); ++i) keys.push_back(others.read(i).key);
  EXPECT_EQ(keys, (std::vector<std::string>{"c/d.png", "c/e.txt", "c/f.jpg.txt", "c/g.PNG"}));
}

TEST(ImageFolderSource, IgnoresHiddenFilesAndFoldersAndFilesAtTheTop) {
  const TempDir dir("ferry_image_folder");
  for (const char* file : {"a/1.jpg", "a/.2.jpg", "a/.cache/3.jpg", "a/sub/.4.jpg", ".git/5.jpg", "6.jpg", "b/7.jpg"}) {
    write_file(dir.path(), file, file);
  }
  const ImageFolderSource source(options_for(dir.path()));
  EXPECT_EQ(source.class_names(), (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(source.size(), 2u);
  EXPECT_EQ(source.read(0).key, "a/1.jpg");
  EXPECT_EQ(source.read(1).key, "b/7.jpg");
}

TEST(ImageFolderSource, FollowsLinksButNotALoop) {
  const TempDir dir("ferry_image_folder");
  write_file(dir.path(), "a/1.jpg", "one");
  write_file(dir.path(), "elsewhere/x/2.jpg", "two");
  ASSERT_EQ(::symlink((dir.path() + "/elsewhere/x").c_str(), (dir.path() + "/a/linked").c_str()), 0);
  ASSERT_EQ(::symlink((dir.path() + "/a").c_str(), (dir.path() + "/a/loop").c_str()), 0);  // a folder inside itself
  ASSERT_EQ(::symlink((dir.path() + "/a/1.jpg").c_str(), (dir.path() + "/a/3.jpg").c_str()), 0);
  ASSERT_EQ(::symlink((dir.path() + "/nowhere.jpg").c_str(), (dir.path() + "/a/4.jpg").c_str()), 0);  // dangling
  ImageFolderOptions options = options_for(dir.path());
  const ImageFolderSource source(options);
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < source.size(); ++i) keys.push_back(source.read(i).key);
  // "elsewhere" is a class of its own too.
  EXPECT_EQ(keys, (std::vector<std::string>{"a/1.jpg", "a/3.jpg", "a/linked/2.jpg", "elsewhere/x/2.jpg"}));
  EXPECT_EQ(text_of(source.read(1).fields[0]), "one");
  EXPECT_EQ(text_of(source.read(2).fields[0]), "two");
}

TEST(ImageFolderSource, RefusesAMissingRootAFileAndAFolderWithoutClasses) {
  const TempDir dir("ferry_image_folder");
  const std::string missing = dir / "missing";
  EXPECT_EQ(error_of([&] { ImageFolderSource source(options_for(missing)); }),
            "ferry: image folder '" + missing + "': No such file or directory");
  write_file(dir.path(), "file.jpg", "x");
  EXPECT_EQ(error_of([&] { ImageFolderSource source(options_for(dir / "file.jpg")); }),
            "ferry: image folder '" + (dir / "file.jpg") + "' is not a folder");
  // Files at the top belong to no class.
  EXPECT_NE(error_of([&] {
              ImageFolderSource source(options_for(dir.path()));
            }).find("image folder '" + dir.path() + "' holds no class folder"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { ImageFolderSource source(options_for("")); }), "ferry: image folder: no root folder given");
}

TEST(ImageFolderSource, RefusesAClassFolderWithoutMatchingFilesNamingIt) {
  const TempDir dir("ferry_image_folder");
  write_file(dir.path(), "a/1.jpg", "x");
  write_file(dir.path(), "b/readme.txt", "x");
  write_file(dir.path(), "b/sub/.hidden.jpg", "x");
  const std::string message = error_of([&] { ImageFolderSource source(options_for(dir.path())); });
  EXPECT_NE(message.find("the class folder 'b' holds no file ending in .jpg, .jpeg"), std::string::npos) << message;
  EXPECT_NE(message.find(dir.path()), std::string::npos) << message;
}

TEST(ImageFolderSource, RefusesABadImageSpec) {
  const TempDir dir("ferry_image_folder");
  write_file(dir.path(), "a/1.jpg", "x");
  ImageFolderOptions options = options_for(dir.path());
  options.image.name = "label";
  EXPECT_NE(error_of([&] { ImageFolderSource source(options); }).find("the name 'label' is taken"), std::string::npos);
  options = options_for(dir.path());
  options.image.shape = {4, -2};
  EXPECT_NE(error_of([&] { ImageFolderSource source(options); }).find("sizes are >= 0"), std::string::npos);
  options = options_for(dir.path());
  options.extensions = {};
  EXPECT_NE(error_of([&] { ImageFolderSource source(options); }).find("no file extensions"), std::string::npos);
}

TEST(ImageFolderSource, AFileGoneAfterTheScanIsAnErrorOfThatSampleOnly) {
  const TempDir dir("ferry_image_folder");
  write_file(dir.path(), "a/1.jpg", "one");
  write_file(dir.path(), "a/2.jpg", "two");
  const ImageFolderSource source(options_for(dir.path()));
  ASSERT_EQ(::unlink((dir / "a/1.jpg").c_str()), 0);
  EXPECT_EQ(error_of([&] { (void)source.read(0); }),
            "ferry: image folder: cannot open '" + (dir / "a/1.jpg") + "': No such file or directory");
  EXPECT_EQ(text_of(source.read(1).fields[0]), "two");
  EXPECT_NE(error_of([&] { (void)source.read(2); }).find("sample 2 is beyond its 2 samples"), std::string::npos);
}

TEST(ImageFolderSource, ReadsFromSeveralThreadsAtOnceGiveEveryFilesBytes) {
  const TempDir dir("ferry_image_folder");
  std::mt19937_64 rng(5);
  std::vector<std::string> contents;
  for (int c = 0; c < 4; ++c) {
    for (int f = 0; f < 50; ++f) {
      char name[32];
      std::snprintf(name, sizeof name, "c%d/%03d.jpg", c, f);
      contents.push_back(random_bytes(rng, 20000));
      write_file(dir.path(), name, contents.back());
    }
  }
  const ImageFolderSource source(options_for(dir.path()));
  ASSERT_EQ(source.size(), contents.size());
  for (const int threads : {1, 2, 4, 8}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    std::vector<int> mismatches(static_cast<size_t>(threads), 0);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::vector<uint64_t> order(source.size());
        for (uint64_t i = 0; i < order.size(); ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), std::mt19937_64(static_cast<uint64_t>(t)));
        for (const uint64_t i : order) {
          const EncodedSample sample = source.read(i);
          if (text_of(sample.fields[0]) != contents[i] ||
              sample.fields[1].item<int64_t>() != static_cast<int64_t>(i / 50)) {
            ++mismatches[static_cast<size_t>(t)];
          }
        }
      });
    }
    for (std::thread& worker : workers) worker.join();
    for (int t = 0; t < threads; ++t) EXPECT_EQ(mismatches[static_cast<size_t>(t)], 0) << "thread " << t;
  }
}

// The bytes read are the file's: JpegDecoder makes the same pixels from them as from the encoder's output.
TEST(ImageFolderSource, ItsBytesDecodeAsTheJpegWritten) {
  const TempDir dir("ferry_image_folder");
  const JpegEncoder encoder;
  std::vector<at::Tensor> encoded;
  for (int i = 0; i < 3; ++i) {
    const at::Tensor image = at::randint(0, 256, {20 + i, 30, 3}, at::kByte);
    encoded.push_back(encoder.encode(image));
    write_file(dir.path(), "k/" + std::to_string(i) + ".jpg", text_of(encoded.back()));
  }
  ImageFolderOptions options = options_for(dir.path());
  options.image.shape = {16, 16, 3};
  options.image.decoder = "jpeg";
  const ImageFolderSource source(options);
  const JpegDecoder decoder(JpegDecodeOptions{.resize_shorter = 18, .crop_height = 16, .crop_width = 16});
  for (uint64_t i = 0; i < 3; ++i) {
    const at::Tensor from_source = decoder.decode(source.read(i).fields[0], source.fields()[0]);
    const at::Tensor expected = decoder.decode(encoded[i], source.fields()[0]);
    EXPECT_TRUE(at::equal(from_source, expected)) << i;
  }
}

}  // namespace
}  // namespace ferry

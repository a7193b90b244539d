// Image datasets from YAML: an image folder and tar shards of JPEGs, decoded with the config's
// resize_shorter and crop. Every delivered image must equal what JpegDecoder makes of the file with
// the same options (so each byte is checked), every label the one written; random crops repeat for
// a seed and change with it; two pipelines with different options run side by side in one process.
//
// Every run delivers to the CPU; the device only changes where the bytes land (tests/cuda/).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ferry/assembly/config.h>
#include <ferry/assembly/config_error.h>
#include <ferry/assembly/config_loader.h>
#include <ferry/assembly/configured_pipeline.h>
#include <ferry/io/decoders/image_decoder.h>
#include <ferry/io/decoders/jpeg_decoder.h>
#include <ferry/io/decoders/jpeg_encoder.h>
#include <ferry/io/formats/tar_writer.h>
#include <ferry/pipeline/pipeline.h>
#include <ferry/stages/standard_pipeline.h>
#include "tests/support/image_checks.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tensor_bytes.h"

namespace ferry {
namespace {

using testing::TempDir;
using testing::text_of;
using Crop = JpegDecodeOptions::Crop;

// One image as written: its key in the source, its file's bytes (JPEG, or PNG) and its label.
struct Written {
  std::string key;
  at::Tensor jpeg;
  int64_t label = 0;
};

// An RGB image of random size in [min, max] pixels a side, with smooth content plus noise (so crops
// at different offsets differ), drawn from `rng`.
at::Tensor random_image(std::mt19937_64& rng, int64_t min, int64_t max) {
  const int64_t height = min + static_cast<int64_t>(rng() % static_cast<uint64_t>(max - min + 1));
  const int64_t width = min + static_cast<int64_t>(rng() % static_cast<uint64_t>(max - min + 1));
  at::Tensor image = at::empty({height, width, 3}, at::kByte);
  uint8_t* out = image.data_ptr<uint8_t>();
  const int64_t phase = static_cast<int64_t>(rng() % 97);
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t x = 0; x < width; ++x) {
      for (int64_t c = 0; c < 3; ++c) *out++ = static_cast<uint8_t>((x * (3 + c) + y * 5 + phase + rng() % 24) & 0xff);
    }
  }
  return image;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// root/class-<c>/<n>.jpg, 1..5 images per class (some in a sub-folder), in sample order; makes root.
std::vector<Written> write_image_folder(const std::string& root, std::mt19937_64& rng, int classes) {
  ::mkdir(root.c_str(), 0755);
  std::vector<Written> written;
  const JpegEncoder encoder;
  for (int c = 0; c < classes; ++c) {
    char name[32];
    std::snprintf(name, sizeof name, "class-%03d", c);
    ::mkdir((root + "/" + name).c_str(), 0755);
    ::mkdir((root + "/" + name + "/more").c_str(), 0755);
    const int files = static_cast<int>(rng() % 5) + 1;
    for (int f = 0; f < files; ++f) {
      // The last file of a class in a sub-folder: "more/" sorts after the digits, so keys are
      // written in sample order.
      const std::string file =
          f == files - 1 && f > 0 ? "more/" + std::to_string(f) + ".jpg" : std::to_string(f) + ".jpg";
      Written image{std::string(name) + "/" + file, encoder.encode(random_image(rng, 40, 72)), c};
      write_file(root + "/" + image.key, text_of(image.jpeg));
      written.push_back(std::move(image));
    }
  }
  return written;
}

struct Delivered {
  std::map<uint64_t, at::Tensor> images;                         // by sample index (the last epoch's, over several)
  std::map<uint64_t, uint64_t> epochs;                           // the epoch each of `images` comes from
  std::map<std::pair<uint64_t, uint64_t>, at::Tensor> by_epoch;  // (epoch, sample index)
  std::map<uint64_t, int64_t> labels;
  size_t samples = 0;
};

Delivered run(Pipeline pipeline) {
  Delivered out;
  while (auto batch = pipeline.next()) {
    const at::Tensor images = (*batch)["image"];
    const at::Tensor labels = (*batch)["label"];
    for (size_t row = 0; row < batch->batch_size(); ++row) {
      const uint64_t index = batch->sample_indices()[row];
      out.images[index] = images[static_cast<int64_t>(row)].clone();
      out.epochs[index] = batch->epoch();
      out.by_epoch[{batch->epoch(), index}] = out.images[index];
      out.labels[index] = labels[static_cast<int64_t>(row)].item<int64_t>();
      ++out.samples;
    }
  }
  return out;
}

// Each delivered image equals `decoder` (JpegDecoder(options) unless given) of the file written (for
// its epoch and sample: random crops draw from both), each label the one written.
void expect_as_written(const Delivered& delivered, const std::vector<Written>& written,
                       const JpegDecodeOptions& options, const Decoder* given = nullptr) {
  ASSERT_EQ(delivered.samples, written.size()) << "every sample exactly once";
  ASSERT_EQ(delivered.images.size(), written.size());
  const JpegDecoder jpeg(options);
  const Decoder& decoder = given != nullptr ? *given : jpeg;
  const FieldSpec spec{"image", at::kByte, {options.crop_height, options.crop_width, 3}, std::nullopt, "jpeg"};
  for (const auto& [index, image] : delivered.images) {
    ASSERT_LT(index, written.size());
    SCOPED_TRACE(written[index].key);
    const at::Tensor expected =
        decoder.decode_sample(written[index].jpeg, spec, DecodeContext{delivered.epochs.at(index), index});
    EXPECT_TRUE(at::equal(image, expected)) << "sample " << index;
    EXPECT_EQ(delivered.labels.at(index), written[index].label) << "sample " << index;
  }
}

std::string image_folder_yaml(const std::string& root, const std::string& crop, uint64_t seed) {
  return "source:\n  kind: image_folder\n  root: " + root +
         "\n  image: {shape: [32, 32, 3], resize_shorter: 40, crop: " + crop +
         "}\nbatch_size: 5\n"
         "sampler: {shuffle: true, seed: " +
         std::to_string(seed) + "}\ntransfer: {device: cpu}\ndecode: {threads: 3}\n";
}

TEST(ImageConfigPipeline, AnImageFolderDeliversEachImageAsTheJpegDecoderMakesIt) {
  const TempDir dir("ferry_image_pipeline");
  std::mt19937_64 rng(21);
  const std::vector<Written> written = write_image_folder(dir / "images", rng, 4);
  write_file(dir / "center.yaml", image_folder_yaml(dir / "images", "center", 3));
  const Delivered delivered = run(load_pipeline(dir / "center.yaml"));
  expect_as_written(delivered, written, JpegDecodeOptions{.resize_shorter = 40, .crop_height = 32, .crop_width = 32});
  // A center crop draws nothing: another seed (another order) delivers the same pixels.
  const Delivered again = run(load_pipeline(dir / "center.yaml", {"sampler.seed=4"}));
  for (const auto& [index, image] : delivered.images) EXPECT_TRUE(at::equal(image, again.images.at(index))) << index;
}

// Note [GPU JPEG decode]: device: auto decodes on the CPU where it cannot use the GPU's decoder (here:
// batches go to the CPU), exactly as device: cpu; device: gpu then refuses to start, naming its key.
TEST(ImageConfigPipeline, DeviceAutoFallsBackToTheCpuAndDeviceGpuNeedsAGpuDelivery) {
  const TempDir dir("ferry_image_pipeline");
  std::mt19937_64 rng(23);
  const std::vector<Written> written = write_image_folder(dir / "images", rng, 3);
  write_file(dir / "auto.yaml", image_folder_yaml(dir / "images", "random", 5));
  const Delivered delivered = run(load_pipeline(dir / "auto.yaml", {"source.image.device=auto"}));
  expect_as_written(
      delivered, written,
      JpegDecodeOptions{.resize_shorter = 40, .crop_height = 32, .crop_width = 32, .crop = Crop::kRandom, .seed = 5});
  try {
    (void)load_pipeline(dir / "auto.yaml", {"source.image.device=gpu"});
    FAIL() << "device: gpu started with batches going to the CPU";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u) << e.what();
    EXPECT_EQ(e.problems()[0].key, "source.image.device");
    EXPECT_NE(e.problems()[0].message.find("batches go to cpu"), std::string::npos) << e.what();
  }
}

// A folder of JPEGs and PNGs read through decoder `image`: each file decoded by its format's decoder.
TEST(ImageConfigPipeline, AFolderMixingJpegsAndPngsDecodesEachByItsFormat) {
  const TempDir dir("ferry_image_pipeline");
  std::mt19937_64 rng(31);
  std::vector<Written> written = write_image_folder(dir / "images", rng, 3);
  size_t pngs = 0;
  for (size_t i = 0; i < written.size(); i += 2) {  // every other file becomes a PNG of the same picture
    Written& image = written[i];
    ::unlink((dir / "images" + "/" + image.key).c_str());
    image.key = image.key.substr(0, image.key.size() - 3) + "png";
    image.jpeg = testing::encode_png(random_image(rng, 40, 72));
    write_file(dir / "images" + "/" + image.key, text_of(image.jpeg));
    ++pngs;
  }
  ASSERT_GT(pngs, 0u);
  write_file(dir / "mixed.yaml", "source:\n  kind: image_folder\n  root: " + dir / "images" +
                                     "\n  extensions: [jpg, png]\n  image: {decoder: image, shape: [32, 32, 3], "
                                     "resize_shorter: 40, crop: random}\nbatch_size: 4\nsampler: {seed: 5}\n"
                                     "transfer: {device: cpu}\ndecode: {threads: 3}\n");
  const Delivered delivered = run(load_pipeline(dir / "mixed.yaml"));
  const JpegDecodeOptions options{
      .resize_shorter = 40, .crop_height = 32, .crop_width = 32, .crop = Crop::kRandom, .seed = 5};
  const ImageDecoder decoder(options);
  expect_as_written(delivered, written, options, &decoder);
  // Through decoder jpeg the same folder is refused before anything runs.
  EXPECT_THROW(load_pipeline(dir / "mixed.yaml", {"source.image.decoder=jpeg"}), ConfigError);
  // decode.decoders overrides the source's decoder, keeping the field's resize and crop: png fails on
  // the folder's JPEGs (decode.on_error is fail), naming the file.
  try {
    (void)run(load_pipeline(dir / "mixed.yaml", {"decode.decoders.image=png"}));
    ADD_FAILURE() << "decode.decoders.image=png was ignored";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a PNG"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(".jpg"), std::string::npos) << e.what();
  }
}

TEST(ImageConfigPipeline, RandomCropsRepeatForASeedAndChangeWithIt) {
  const TempDir dir("ferry_image_pipeline");
  std::mt19937_64 rng(22);
  const std::vector<Written> written = write_image_folder(dir / "images", rng, 5);
  write_file(dir / "random.yaml", image_folder_yaml(dir / "images", "random", 7));
  const JpegDecodeOptions seven{
      .resize_shorter = 40, .crop_height = 32, .crop_width = 32, .crop = Crop::kRandom, .seed = 7};
  const Delivered first = run(load_pipeline(dir / "random.yaml"));
  expect_as_written(first, written, seven);
  const Delivered second = run(load_pipeline(dir / "random.yaml"));
  for (const auto& [index, image] : first.images) EXPECT_TRUE(at::equal(image, second.images.at(index))) << index;

  JpegDecodeOptions eight = seven;
  eight.seed = 8;
  const Delivered other = run(load_pipeline(dir / "random.yaml", {"sampler.seed=8"}));
  expect_as_written(other, written, eight);
  size_t differing = 0;
  for (const auto& [index, image] : first.images) differing += at::equal(image, other.images.at(index)) ? 0 : 1;
  // Each image has 9 x 9 or more offsets: a few may coincide, most must not.
  EXPECT_GT(differing, written.size() / 2) << "seed 8 crops as seed 7 does";
}

// Augmentation: a sample gets another random crop every epoch (drawn from seed, epoch and sample),
// each exactly what JpegDecoder::decode_sample makes for that epoch.
TEST(ImageConfigPipeline, RandomCropsChangeEveryEpoch) {
  const TempDir dir("ferry_image_pipeline");
  std::mt19937_64 rng(23);
  const std::vector<Written> written = write_image_folder(dir / "images", rng, 5);
  write_file(dir / "random.yaml", image_folder_yaml(dir / "images", "random", 7));
  const Delivered run_out = run(load_pipeline(dir / "random.yaml", {"sampler.epochs=2"}));
  const JpegDecoder decoder(
      {.resize_shorter = 40, .crop_height = 32, .crop_width = 32, .crop = Crop::kRandom, .seed = 7});
  const FieldSpec spec{"image", at::kByte, {32, 32, 3}, std::nullopt, "jpeg"};
  ASSERT_EQ(run_out.by_epoch.size(), 2 * written.size());
  size_t differing = 0;
  for (uint64_t index = 0; index < written.size(); ++index) {
    for (uint64_t epoch = 0; epoch < 2; ++epoch) {
      EXPECT_TRUE(at::equal(run_out.by_epoch.at({epoch, index}),
                            decoder.decode_sample(written[index].jpeg, spec, DecodeContext{epoch, index})))
          << "epoch " << epoch << ", sample " << index;
    }
    differing += at::equal(run_out.by_epoch.at({0, index}), run_out.by_epoch.at({1, index})) ? 0 : 1;
  }
  EXPECT_GT(differing, written.size() / 2) << "epoch 1 crops as epoch 0 does";
}

// Two pipelines in one process, built from configs with different options, running interleaved:
// each field's decoder is its pipeline's own, not a shared registry entry.
TEST(ImageConfigPipeline, TwoPipelinesWithDifferentOptionsDoNotClash) {
  const TempDir dir("ferry_image_pipeline");
  std::mt19937_64 rng(23);
  const std::vector<Written> written = write_image_folder(dir / "images", rng, 3);
  write_file(dir / "a.yaml", image_folder_yaml(dir / "images", "random", 1));
  write_file(dir / "b.yaml", image_folder_yaml(dir / "images", "center", 1));
  Pipeline a = load_pipeline(dir / "a.yaml");
  Pipeline b = load_pipeline(dir / "b.yaml", {"source.image.shape=[24, 28, 3]", "source.image.resize_shorter=30"});
  Delivered from_a, from_b;
  for (bool more_a = true, more_b = true; more_a || more_b;) {
    for (auto [pipeline, out, more] : {std::tuple{&a, &from_a, &more_a}, std::tuple{&b, &from_b, &more_b}}) {
      if (!*more) continue;
      auto batch = pipeline->next();
      if (!batch) {
        *more = false;
        continue;
      }
      for (size_t row = 0; row < batch->batch_size(); ++row) {
        const uint64_t index = batch->sample_indices()[row];
        out->images[index] = (*batch)["image"][static_cast<int64_t>(row)].clone();
        out->epochs[index] = batch->epoch();
        out->labels[index] = (*batch)["label"][static_cast<int64_t>(row)].item<int64_t>();
        ++out->samples;
      }
    }
  }
  expect_as_written(from_a, written,
                    {.resize_shorter = 40, .crop_height = 32, .crop_width = 32, .crop = Crop::kRandom, .seed = 1});
  expect_as_written(from_b, written, {.resize_shorter = 30, .crop_height = 24, .crop_width = 28});
}

TEST(ImageConfigPipeline, TarShardsOfJpegsDeliverEachImageAsTheJpegDecoderMakesIt) {
  const TempDir dir("ferry_image_pipeline");
  std::mt19937_64 rng(24);
  const JpegEncoder encoder;
  std::vector<Written> written;
  for (int s = 0; s < 3; ++s) {
    TarWriter tar;
    const int samples = static_cast<int>(rng() % 6) + 2;
    for (int k = 0; k < samples; ++k) {
      char key[16];
      std::snprintf(key, sizeof key, "%06d", s * 100 + k);
      Written image{key, encoder.encode(random_image(rng, 36, 80)), static_cast<int64_t>(rng() % 1000)};
      tar.add(std::string(key) + ".jpg", text_of(image.jpeg));
      tar.add(std::string(key) + ".cls", std::to_string(image.label) + "\n");
      written.push_back(std::move(image));
    }
    char name[32];
    std::snprintf(name, sizeof name, "shard-%06d.tar", s);
    TarWriter::write_file(dir / name, tar.finish());
  }
  write_file(
      dir / "tar.yaml",
      "source:\n  kind: tar\n  shards: " + (dir / "shard-{000000..000002}.tar") +
          "\n  members:\n"
          "    - {name: image, extension: jpg, decoder: jpeg, shape: [30, 34, 3], resize_shorter: 36, crop: random}\n"
          "    - {name: label, extension: cls, decoder: label, dtype: int64, shape: []}\n"
          "batch_size: 4\nsampler: {seed: 11}\ntransfer: {device: cpu}\ndecode: {threads: 2}\n");
  const Delivered delivered = run(load_pipeline(dir / "tar.yaml"));
  expect_as_written(delivered, written,
                    {.resize_shorter = 36, .crop_height = 30, .crop_width = 34, .crop = Crop::kRandom, .seed = 11});
}

// on_error: skip drops an image that cannot be read (gone after the scan) or decoded (not a JPEG),
// naming it; every other image comes as written.
TEST(ImageConfigPipeline, AnImageThatCannotBeReadOrDecodedIsSkippedByName) {
  const TempDir dir("ferry_image_pipeline");
  std::mt19937_64 rng(25);
  const std::vector<Written> written = write_image_folder(dir / "images", rng, 3);
  const std::string broken = "class-001/broken.jpg";
  write_file(dir / "images" + "/" + broken, "not a jpeg at all");
  write_file(dir / "run.yaml", image_folder_yaml(dir / "images", "center", 0));
  const Config config = load_config(dir / "run.yaml", {"decode.on_error=skip"});
  const std::shared_ptr<const Source> source = make_source(config.source);
  ASSERT_EQ(source->size(), written.size() + 1);
  // Sample order is the keys' byte order here (class folders of equal-length names).
  std::vector<std::string> keys{broken};
  for (const Written& image : written) keys.push_back(image.key);
  std::sort(keys.begin(), keys.end());
  const std::string gone = written[0].key;
  ASSERT_EQ(::unlink((dir / "images/" + gone).c_str()), 0);

  Pipeline pipeline = make_pipeline(source, config.pipeline, nullptr, make_field_decoders(config, *source));
  std::map<std::string, at::Tensor> delivered;  // by key
  while (auto batch = pipeline.next()) {
    for (size_t row = 0; row < batch->batch_size(); ++row) {
      delivered[keys.at(batch->sample_indices()[row])] = (*batch)["image"][static_cast<int64_t>(row)].clone();
    }
  }
  const PipelineStats stats = pipeline.stats();
  ASSERT_EQ(stats.skipped.size(), 2u);
  EXPECT_EQ(keys.at(stats.skipped[0].index), gone);
  EXPECT_NE(stats.skipped[0].reason.find("cannot open '" + (dir / "images/") + gone + "'"), std::string::npos)
      << stats.skipped[0].reason;
  EXPECT_EQ(keys.at(stats.skipped[1].index), broken);
  EXPECT_EQ(stats.skipped[1].key, broken);
  ASSERT_EQ(delivered.size(), written.size() - 1);
  const JpegDecoder decoder(JpegDecodeOptions{.resize_shorter = 40, .crop_height = 32, .crop_width = 32});
  const FieldSpec spec{"image", at::kByte, {32, 32, 3}, std::nullopt, "jpeg"};
  for (const Written& image : written) {
    if (image.key == gone) continue;
    ASSERT_EQ(delivered.count(image.key), 1u) << image.key;
    EXPECT_TRUE(at::equal(delivered.at(image.key), decoder.decode(image.jpeg, spec))) << image.key;
  }
}

TEST(ImageConfigPipeline, TheOrderRecordsTheFolderAndTheCropSeed) {
  const TempDir dir("ferry_image_pipeline");
  std::mt19937_64 rng(26);
  (void)write_image_folder(dir / "images", rng, 2);
  const std::string yaml = "source: {kind: image_folder, root: " + (dir / "images") +
                           "/, image: {shape: [32, 32, 3], resize_shorter: 40, crop: random}}\nsampler: {seed: 5}\n";
  const Config config = parse_config(yaml, "order.yaml");
  const auto source = make_source(config.source);
  const auto order = batch_order(config, Placement{}, *source);
  char real[PATH_MAX];
  ASSERT_NE(::realpath((dir / "images").c_str(), real), nullptr);
  EXPECT_EQ(order.at("source.root"), std::string(real));
  EXPECT_EQ(order.at("source.extensions"), "jpeg;jpg;");
  EXPECT_EQ(order.at("source.classes"), "2");
  EXPECT_EQ(order.at("source.image"), "jpeg[32,32,3,]:resize_shorter=40:crop=random");
  EXPECT_EQ(order.at("sampler.seed"), "5") << "the seed draws the crops, even without a shuffle";
  const Config center = parse_config(yaml, "order.yaml", {"source.image.crop=center"});
  EXPECT_EQ(batch_order(center, Placement{}, *source).count("sampler.seed"), 0u);
}

}  // namespace
}  // namespace ferry

#include "ferry/stages/standard_pipeline.h"
#include "ferry/stages/standard_stages.h"

#include <algorithm>

#include "ferry/io/decoders/decoder_registry.h"
#include "ferry/io/decoders/nvjpeg_decoder.h"
#include "ferry/io/samplers/sequential_sampler.h"
#include "ferry/pipeline/advanced.h"
#include "ferry/pipeline/cuda_device.h"
#include "ferry/stages/batch_planner.h"
#include "ferry/stages/collate_stage.h"
#include "ferry/stages/dataset_cache_plan.h"
#include "ferry/stages/decode_stage.h"
#include "ferry/stages/event_wait_stage.h"
#include "ferry/stages/h2d_submit_stage.h"
#include "ferry/stages/image_augment.h"
#include "ferry/stages/pack_stage.h"

namespace ferry {

at::Device resolve_device(const std::string& name) {
  if (name == "cpu") return at::Device(at::kCPU);
  if (name == "auto") {
    return gpu_build() && cuda_device_count() > 0 ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  }
  if (name != "cuda" && name.rfind("cuda:", 0) != 0) {
    throw Error("invalid option device: expected auto, cpu, cuda or cuda:N, found '" + name + "'");
  }
  int index = 0;
  if (name != "cuda") {
    const std::string digits = name.substr(5);
    if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) {
      throw Error("invalid option device: expected cuda:N with N a device number, found '" + name + "'");
    }
    index = std::stoi(digits);
  }
  if (!gpu_build()) throw Error("device '" + name + "' needs GPU support, but this is a " + build_description());
  const int count = cuda_device_count();
  if (count == 0) throw Error("device '" + name + "': " + cuda_unavailable_reason());
  if (index >= count) {
    throw Error("device '" + name + "' does not exist: " + std::to_string(count) + " CUDA device" +
                (count == 1 ? " is" : "s are") + " visible (cuda:0" +
                (count > 1 ? "..cuda:" + std::to_string(count - 1) : std::string()) + ")");
  }
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
}

namespace {

// Note [GPU JPEG decode]: hands the decode stage the GPU decoder for the jpeg fields whose decoder says
// `device: gpu` or `auto`. device: gpu without one fails; auto without one decodes on the CPU (the report
// then has no jpeg line).
void use_gpu_decoder(DecodeStage& decode, const PipelineOptions& options, const at::Device& device) {
  std::vector<std::string> fields;
  bool all = true;  // every GPU field wants the GPU for every image it can decode
  for (const auto& [field, where] : decode.gpu_fields()) {
    const bool gpu = where == ImageDecodeOptions::Device::kGpu;
    if (gpu && !device.is_cuda()) {
      throw Error("field '" + field + "' is to be decoded on the GPU (device: gpu), but batches go to " + device.str() +
                  ": deliver to a CUDA device (transfer.device), or decode it on the CPU");
    }
    fields.push_back(field);
    all = all && gpu;
  }
  if (fields.empty()) return;
  // Sample transforms run on the CPU after the fields they use are decoded, and the dataset cache keeps
  // samples decoded on the CPU: auto decodes on the CPU where either needs it.
  const bool transforms_need = std::any_of(
      fields.begin(), fields.end(), [&](const std::string& field) { return !decode.transforms_need(field).empty(); });
  if (!all && (transforms_need || options.cache.enabled())) return;
  if (options.cache.enabled()) {
    throw Error("field '" + fields.front() +
                "' is to be decoded on the GPU, which the dataset cache does not support yet: decode it on the CPU, "
                "or turn the cache off");
  }
  std::shared_ptr<detail::NvJpegDecoder> nvjpeg;
  try {
    if (!device.is_cuda()) throw Error("batches go to " + device.str());
    // Under auto the CPU decodes everything while the GPU decoder starts (about a second on an H200).
    using Start = detail::NvJpegDecoder::Start;
    nvjpeg = std::make_shared<detail::NvJpegDecoder>(device.index(), all ? Start::kNow : Start::kInBackground);
  } catch (const Error&) {
    if (all) throw;
    return;
  }
  decode.use_gpu(std::move(nvjpeg), fields, all ? SampleStage::GpuShare::kAll : SampleStage::GpuShare::kAuto);
}

}  // namespace

StageSet make_standard_stages(std::shared_ptr<const Source> source, PipelineOptions& options,
                              std::shared_ptr<const Sampler> sampler, const FieldDecoders& field_decoders,
                              SampleTransforms transforms) {
  options.check();
  if (!source) throw Error("make_pipeline: no source");
  const at::Device device = resolve_device(options.device);
  options.device = device.str();
  if (!sampler) sampler = std::make_shared<SequentialSampler>(source->size());

  auto decode = std::make_unique<DecodeStage>(source, DecoderRegistry::global(), options.decoders, field_decoders,
                                              std::move(transforms));
  // The samples as collated: the source's fields, or what the transforms made of them.
  const std::vector<FieldSpec>& fields = decode->fields();
  auto collate = std::make_unique<CollateStage>(fields, options.collate, options.transfer.min_alignment);
  const std::optional<size_t> slab_bytes = options.pool.slab_size(collate->max_batch_bytes(options.batch_size));
  if (!slab_bytes) {
    std::string field;
    for (const FieldSpec& spec : fields) {
      if (spec.variable() && !spec.max_length) field = spec.name;
    }
    throw Error("pool.slab_bytes must be set: field '" + field + "' of " + source->describe() +
                " is variable-length with no max_length, so the largest batch is unknown");
  }

  PinnedPoolOptions pool_options;
  pool_options.slab_bytes = *slab_bytes;
  pool_options.slab_count = options.pool.slabs(options.prefetch);
  pool_options.budget_bytes = options.pool.budget_bytes;
  pool_options.device = device.is_cuda() ? device.index() : 0;
  pool_options.pinned = device.is_cuda();

  use_gpu_decoder(*decode, options, device);
  std::shared_ptr<DatasetCache> cache;
  if (options.cache.enabled()) {
    cache = DatasetCache::create(
        plan_dataset_cache(*decode, options, device, *sampler, collate->max_batch_bytes(options.batch_size)));
    decode->use_cache(cache);
    collate->use_cache(cache);
  }

  std::shared_ptr<const ImageAugment> augment;
  if (options.augment.enabled()) augment = make_image_augment(options.augment, fields);

  // Note [placing samples]: not where a sample's batch is known only after decode (re-cut batches) or
  // where the dataset cache keeps the decoded tensors.
  std::vector<SamplePlacer::Field> placed = collate->leading_fixed_fields();

  StageSet stages;
  auto planner = std::make_unique<BatchPlanner>(sampler, BatchPlanner::Options::of(options));
  decode->read_in_order(planner->read_order(options.resolved_decode_threads(), decode->progress()));
  stages.batches = std::move(planner);
  stages.decode = std::move(decode);
  stages.collate = std::move(collate);
  stages.pool = PinnedPool::create(pool_options);
  if (!placed.empty() && !options.refills() && !cache) {
    stages.placer = std::make_unique<SamplePlacer>(std::move(placed), stages.pool, options.transfer.direct_copy_bytes,
                                                   options.transfer.parallel_pack_bytes);
  }
  stages.pack = std::make_unique<PackStage>(stages.pool, options.transfer);
  stages.h2d = std::make_unique<H2DSubmitStage>(device, options.transfer, cache, augment, options.prefetch);
  stages.cache = cache;
  stages.event_wait = std::make_unique<EventWaitStage>(options.transfer.wait);
  return stages;
}

Pipeline make_pipeline(std::shared_ptr<const Source> source, PipelineOptions options,
                       std::shared_ptr<const Sampler> sampler, const FieldDecoders& field_decoders,
                       SampleTransforms transforms) {
  StageSet stages =
      make_standard_stages(std::move(source), options, std::move(sampler), field_decoders, std::move(transforms));
  return pipeline_from_stages(std::move(stages), std::move(options));
}

}  // namespace ferry

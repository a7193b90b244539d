#include "ferry/stages/decode_stage.h"

#include <algorithm>
#include <sstream>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "ferry/io/decoders/image_window.h"
#include "ferry/io/decoders/jpeg_decoder.h"
#include "ferry/io/decoders/jpeg_markers.h"
#include "ferry/io/decoders/nvjpeg_decoder.h"
#include "ferry/io/transforms/transform_registry.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/error.h"
#include "ferry/pipeline/field_loop.h"

namespace ferry {
namespace {

std::string sizes_text(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << sizes;
  return out.str();
}

// `made` says who made the tensor and who declared its spec: a decoder and the source, or a transform.
struct Maker {
  std::string_view what;      // "decoder", "transform"
  std::string_view declarer;  // "the source declares", "it declared"
};
constexpr Maker kDecoderMade{"decoder", "the source declares"};
constexpr Maker kTransformMade{"transform", "it declared"};

void check_decoded(const at::Tensor& tensor, const FieldSpec& spec, const Maker& made = kDecoderMade) {
  if (!tensor.defined()) throw Error("the " + std::string(made.what) + " returned no tensor");
  if (!tensor.device().is_cpu()) {
    throw Error("the " + std::string(made.what) + " returned a tensor on " + tensor.device().str() + ", not the CPU");
  }
  if (tensor.scalar_type() != spec.dtype) {
    throw Error("decoded dtype " + dtype_name(tensor.scalar_type()) + " but " + std::string(made.declarer) + " " +
                dtype_name(spec.dtype));
  }
  bool ok = tensor.dim() == static_cast<int64_t>(spec.shape.size());
  for (size_t d = 0; ok && d < spec.shape.size(); ++d) {
    ok = spec.shape[d] == kVariableLength || spec.shape[d] == tensor.size(static_cast<int64_t>(d));
  }
  if (!ok) {
    std::ostringstream declared;
    declared << "[";
    for (size_t d = 0; d < spec.shape.size(); ++d) {
      declared << (d ? ", " : "")
               << (spec.shape[d] == kVariableLength ? std::string("*") : std::to_string(spec.shape[d]));
    }
    declared << "]";
    throw Error("decoded shape " + sizes_text(tensor.sizes()) + " does not match the declared " + declared.str());
  }
  // max_length bounds the product of the sizes that vary: a field's rows, an image's pixels.
  if (spec.max_length) {
    int64_t varying = 1, count = 0;
    for (size_t d = 0; d < spec.shape.size(); ++d) {
      if (spec.shape[d] == kVariableLength) {
        varying *= tensor.size(static_cast<int64_t>(d));
        ++count;
      }
    }
    if (count == 1 && varying > *spec.max_length) {
      throw Error("decoded length " + std::to_string(varying) + " exceeds max_length " +
                  std::to_string(*spec.max_length));
    }
    if (count > 1 && varying > *spec.max_length) {
      throw Error("decoded shape " + sizes_text(tensor.sizes()) + " holds " + std::to_string(varying) +
                  " in its sizes that vary (their product), more than the field's bound " +
                  std::to_string(*spec.max_length) +
                  " (max_pixels of an image; a resize_shorter makes images "
                  "smaller)");
    }
  }
}

// A field left for the GPU's JPEG decoder (Note [GPU JPEG decode] in io/decoders/nvjpeg_decoder.h): the
// encoded bytes and where the field's image comes from.
struct PendingImage : PendingWork {
  size_t field = 0;
  at::Tensor encoded;  // contiguous uint8 bytes of the file
  int64_t width = 0, height = 0;
  detail::ImageWindow window;
};

}  // namespace

DecodeStage::DecodeStage(std::shared_ptr<const Source> source, const DecoderRegistry& registry,
                         const std::map<std::string, std::string, std::less<>>& decoders,
                         const FieldDecoders& instances, SampleTransforms transforms)
    : source_(std::move(source)), transforms_(std::move(transforms)) {
  if (!source_) throw Error("decode stage: no source");
  parts_ = source_->mixed_parts();
  part_samples_ = std::vector<Counter>(kCountShards * parts_.size());
  const auto& specs = source_->fields();
  const auto has_field = [&](std::string_view field) {
    return std::any_of(specs.begin(), specs.end(), [&](const FieldSpec& spec) { return spec.name == field; });
  };
  for (const auto& [field, decoder] : decoders) {
    if (!has_field(field)) {
      throw Error("decoder '" + decoder + "' is set for field '" + field + "', which " + source_->describe() +
                  " does not have");
    }
  }
  for (const auto& [field, decoder] : instances) {
    if (!decoder) throw Error("no decoder (null) given for field '" + field + "'");
    if (!has_field(field)) {
      throw Error("decoder '" + std::string(decoder->name()) + "' is given for field '" + field + "', which " +
                  source_->describe() + " does not have");
    }
  }
  for (const FieldSpec& spec : specs) {
    if (const auto given = instances.find(spec.name); given != instances.end()) {
      decoders_.push_back(given->second);
      continue;
    }
    try {
      const auto chosen = decoders.find(spec.name);
      decoders_.push_back(registry.find(chosen != decoders.end() ? std::string_view(chosen->second) : spec.decoder));
    } catch (const std::exception& e) {
      throw Error("field '" + spec.name + "' of " + source_->describe() + ": " + cause_of(e));
    }
  }
  for (const auto& transform : transforms_.list) {
    if (!transform) throw Error("no transform (null) given");
  }
  decoded_ = specs;
  for (size_t f = 0; f < specs.size(); ++f) {
    const std::vector<FieldSpec> made = decoders_[f]->companions(specs[f]);
    companions_.emplace_back(decoded_.size(), made.size());
    for (const FieldSpec& companion : made) {
      if (std::any_of(decoded_.begin(), decoded_.end(), [&](const FieldSpec& s) { return s.name == companion.name; })) {
        throw Error("field '" + specs[f].name + "': its decoder '" + std::string(decoders_[f]->name()) +
                    "' also makes the field '" + companion.name + "', which the sample has already");
      }
      decoded_.push_back(companion);
    }
  }
  fields_ = transformed_fields(decoded_, transforms_.list);
}

std::vector<std::pair<std::string, ImageDecodeOptions::Device>> DecodeStage::gpu_fields() const {
  std::vector<std::pair<std::string, ImageDecodeOptions::Device>> fields;
  const std::vector<FieldSpec>& specs = source_->fields();
  for (size_t f = 0; f < specs.size(); ++f) {
    const auto* jpeg = dynamic_cast<const JpegDecoder*>(decoders_[f].get());
    if (jpeg != nullptr && jpeg->options().device != ImageDecodeOptions::Device::kCpu) {
      fields.emplace_back(specs[f].name, jpeg->options().device);
    }
  }
  return fields;
}

std::string DecodeStage::varies_by_epoch(const std::string& field, const Decoder& decoder) {
  return "field '" + field + "' is decoded by '" + std::string(decoder.name()) +
         "' with a random crop or flip, another one every epoch";
}

std::string DecodeStage::varies_by_epoch() const {
  if (!source_->same_every_epoch()) {
    return "the source " + source_->describe() +
           " may make a sample otherwise every epoch (a python source that does not: source.same_every_epoch: true)";
  }
  const std::vector<FieldSpec>& specs = source_->fields();
  for (size_t f = 0; f < specs.size() && f < decoders_.size(); ++f) {
    if (!decoders_[f]->same_every_epoch()) return varies_by_epoch(specs[f].name, *decoders_[f]);
  }
  for (const auto& transform : transforms_.list) {
    if (!transform->same_every_epoch()) {
      return "transform '" + std::string(transform->name()) + "' makes another sample every epoch";
    }
  }
  return "";
}

std::string DecodeStage::transforms_need(const std::string& field) const {
  // A GPU-decoded field is decoded a group at a time after run(), where the transforms have run: they
  // must neither read it nor move it among the fields.
  const auto at = std::find_if(decoded_.begin(), decoded_.end(), [&](const FieldSpec& s) { return s.name == field; });
  const auto i = static_cast<size_t>(at - decoded_.begin());
  for (const auto& transform : transforms_.list) {
    const std::optional<std::vector<std::string>> used = transform->fields_used();
    if (!used || std::find(used->begin(), used->end(), field) != used->end()) {
      return "transform '" + std::string(transform->name()) + "' " +
             (used ? "uses field '" + field + "'" : std::string("may use any field")) +
             ", and sample transforms run on the CPU after the decoders";
    }
  }
  if (!transforms_.list.empty() && (i >= fields_.size() || fields_[i].name != field)) {
    return "the sample transforms move field '" + field + "' among the fields";
  }
  return "";
}

void DecodeStage::use_gpu(std::shared_ptr<detail::NvJpegDecoder> nvjpeg, const std::vector<std::string>& fields,
                          GpuShare share) {
  const std::vector<FieldSpec>& specs = source_->fields();
  for (const std::string& field : fields) {
    if (const std::string why = transforms_need(field); !why.empty()) {
      throw Error("field '" + field + "' is to be decoded on the GPU, but " + why +
                  ": decode it on the CPU (device: cpu), or leave the transforms out");
    }
  }
  on_gpu_.assign(specs.size(), false);
  for (const std::string& field : fields) {
    const auto found =
        std::find_if(specs.begin(), specs.end(), [&](const FieldSpec& spec) { return spec.name == field; });
    if (found == specs.end()) {
      throw Error("field '" + field + "' is to be decoded on the GPU, but " + source_->describe() +
                  " has no such field");
    }
    const auto i = static_cast<size_t>(found - specs.begin());
    if (dynamic_cast<const JpegDecoder*>(decoders_[i].get()) == nullptr) {
      throw Error("field '" + field + "' is to be decoded on the GPU, which the jpeg decoder does; its decoder is '" +
                  std::string(decoders_[i]->name()) + "'");
    }
    on_gpu_[i] = true;
  }
  nvjpeg_ = std::move(nvjpeg);
  share_ = fields.empty() ? GpuShare::kNone : share;
}

// Beside a group per decoding state, groups whose files are read while the states decode others, so that
// a state that comes back finds the next group ready. More would only wait longer: on an H200 (ImageNet
// recipe, 16 threads, 256 x 256) `gpu` decoded 51-54k images/s whether 2, 6 or 10 were read ahead.
constexpr size_t kGroupsReading = 6;

size_t DecodeStage::gpu_groups() const {
  return share_ == GpuShare::kNone ? 0 : detail::NvJpegDecoder::kMaxWorkers + kGroupsReading;
}

SampleStage::GpuReadiness DecodeStage::gpu_readiness() const {
  const size_t states = nvjpeg_ ? nvjpeg_->room() : 0;
  if (states == 0) return GpuReadiness::kStarting;
  return states < detail::NvJpegDecoder::kMaxWorkers ? GpuReadiness::kReady : GpuReadiness::kWarm;
}

PipelineStats::GpuDecodeStats DecodeStage::gpu_stats() const {
  PipelineStats::GpuDecodeStats stats;
  if (share_ == GpuShare::kNone) return stats;
  stats.enabled = true;
  stats.gpu_images = gpu_images_.load(std::memory_order_relaxed);
  stats.cpu_images = cpu_images_.load(std::memory_order_relaxed);
  stats.ready_seconds = nvjpeg_->ready_seconds();
  stats.busy_seconds = nvjpeg_->busy_seconds();
  stats.states = detail::NvJpegDecoder::kMaxWorkers;
  stats.state_busy_seconds = nvjpeg_->state_busy_seconds();
  stats.unavailable = nvjpeg_->failure();
  return stats;
}

bool DecodeStage::defer(SampleWork& work, size_t i, const at::Tensor& encoded) {
  const FieldSpec& spec = source_->fields()[i];
  const auto* jpeg = static_cast<const JpegDecoder*>(decoders_[i].get());
  const at::Tensor bytes = detail::encoded_image_bytes(encoded, spec, "jpeg", "JPEG");
  const auto* data = bytes.data_ptr<uint8_t>();
  // Files the hardware cannot decode, files cut short or with stray bytes between header segments (which
  // the hardware would decode into made-up pixels without a word; jpeg_markers.h says what the check
  // cannot see), and very large images go to the CPU decoder, which says what is wrong with a file and
  // shrinks large ones while it decodes; it reads the header itself.
  const auto size = static_cast<size_t>(bytes.numel());
  if (!detail::jpeg_segments_complete(data, size) || !nvjpeg_->supported(data, size)) return false;
  const detail::JpegHeader header = detail::read_jpeg_header(data, bytes.numel());
  if (int64_t{header.width} * header.height > detail::kMaxImagePixels) return false;
  // CMYK and YCCK become RGB as Pillow makes them (Note [CMYK JPEGs]): the CPU decoder's conversion.
  if (header.colorspace == detail::kJpegColorspaceCmyk || header.colorspace == detail::kJpegColorspaceYcck) {
    return false;
  }
  const DecodeContext context{work.plan->epoch, work.index()};
  const detail::ImageWindow window = detail::plan_image_window("JPEG", header.height, header.width, jpeg->options(),
                                                               detail::CropSource{&context, data, bytes.numel()}, spec);
  // An image of its own size over max_pixels: the CPU decoder says so, naming the sample.
  if (spec.max_length && spec.shape.size() == 3 && spec.shape[0] == kVariableLength &&
      window.out_h() * window.out_w() > *spec.max_length) {
    return false;
  }
  auto pending = std::make_unique<PendingImage>();
  pending->field = i;
  pending->encoded = bytes;
  pending->width = header.width;
  pending->height = header.height;
  pending->window = window;
  work.pending.push_back(std::move(pending));
  // The companions come from the window alone: they are made now, the pixels later.
  if (companions_[i].second != 0) work.fields[companions_[i].first] = detail::window_values(window);
  return true;
}

void DecodeStage::run_pending(const std::vector<SampleWork*>& samples,
                              const std::function<void(SampleWork&, std::exception_ptr)>& failed) {
  // Taken out of the samples first: failed() may replace a sample, which runs run() on it again.
  std::vector<std::pair<SampleWork*, PendingImage>> items;
  int64_t bytes = 0;
  for (SampleWork* sample : samples) {
    for (std::unique_ptr<PendingWork>& work : sample->pending) {
      PendingImage& pending = static_cast<PendingImage&>(*work);  // all this stage's run() leaves
      bytes += pending.window.out_h() * pending.window.out_w() * 3;
      items.emplace_back(sample, std::move(pending));
    }
    sample->pending.clear();
  }
  if (items.empty()) return;
  // One allocation for the group's images; each sample's field is a view of it.
  const at::Tensor memory =
      at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, nvjpeg_->device()));
  std::vector<detail::GpuJpegImage> images;
  std::vector<at::Tensor> views;
  int64_t offset = 0;
  for (const auto& [sample, pending] : items) {
    const int64_t size = pending.window.out_h() * pending.window.out_w() * 3;
    at::Tensor view = memory.narrow(0, offset, size).view({pending.window.out_h(), pending.window.out_w(), 3});
    offset += size;
    detail::GpuJpegImage image;
    image.data = pending.encoded.data_ptr<uint8_t>();
    image.size = static_cast<size_t>(pending.encoded.numel());
    image.width = static_cast<int>(pending.width);
    image.height = static_cast<int>(pending.height);
    image.window = pending.window;
    const ImageDecodeOptions& options = static_cast<const JpegDecoder&>(*decoders_[pending.field]).options();
    image.interpolation = options.interpolation;
    image.antialias = options.antialias;
    image.out = view.data_ptr<uint8_t>();
    images.push_back(image);
    views.push_back(std::move(view));
  }
  std::vector<SampleWork*> done;  // samples that failed: their other images are left alone
  const auto fail = [&](SampleWork& sample, std::exception_ptr error) {
    done.push_back(&sample);
    failed(sample, std::move(error));
  };
  std::vector<std::string> errors;
  try {
    errors = nvjpeg_->decode(images);
  } catch (...) {
    // The device itself failed: every image of the group fails with it.
    for (const auto& item : items) {
      if (std::find(done.begin(), done.end(), item.first) == done.end()) fail(*item.first, std::current_exception());
    }
    return;
  }
  const std::vector<FieldSpec>& specs = source_->fields();
  for (size_t k = 0; k < items.size(); ++k) {
    SampleWork& sample = *items[k].first;
    if (std::find(done.begin(), done.end(), &sample) != done.end()) continue;
    const PendingImage& pending = items[k].second;
    const size_t i = pending.field;
    if (errors[k].empty()) {
      sample.fields[i] = views[k];
      gpu_images_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    // The hardware could not decode it: the CPU decoder tries, and says what is wrong if it cannot either.
    try {
      // The companions were made with the window (defer()), and the transforms have run since.
      decode_into(sample, i, pending.encoded, /*with_companions=*/false);
      cpu_images_.fetch_add(1, std::memory_order_relaxed);
    } catch (const std::exception& e) {
      sample.fields[i] = at::Tensor();
      fail(sample, std::make_exception_ptr(Error(sample.key + ": field '" + specs[i].name + "' (decoder 'jpeg'): " +
                                                 errors[k] + " on the GPU; on the CPU: " + cause_of(e))));
    }
  }
  // A sample whose images all decoded counts for its part of a mixture now; run() left it to this.
  // (items holds each sample's images one after another.)
  for (size_t k = 0; k < items.size(); ++k) {
    SampleWork* sample = items[k].first;
    if (k + 1 < items.size() && items[k + 1].first == sample) continue;
    if (std::find(done.begin(), done.end(), sample) == done.end()) count_part(sample->index());
  }
}

namespace {

// A sample read with its group's others (DecodeStage::prepare()), or why it could not be.
struct ReadAhead : PendingWork {
  uint64_t index = 0;
  ReadResult read;
};

}  // namespace

bool DecodeStage::wide_groups() const { return source_->reads_in_groups(); }

std::vector<UserCodeStats> DecodeStage::user_code() const {
  std::vector<UserCodeStats> all;
  if (std::optional<UserCodeStats> code = source_->user_code()) all.push_back(std::move(*code));
  for (const auto& transform : transforms_.list) {
    if (std::optional<UserCodeStats> code = transform->user_code()) all.push_back(std::move(*code));
  }
  return all;
}

std::vector<SourcePartStats> DecodeStage::source_parts() const {
  std::vector<SourcePartStats> parts = parts_;
  for (size_t i = 0; i < part_samples_.size(); ++i) {
    parts[i % parts.size()].samples += part_samples_[i].value.load(std::memory_order_relaxed);
  }
  return parts;
}

void DecodeStage::count_part(uint64_t index) {
  if (parts_.empty()) return;
  // Each thread its own shard (round-robin as threads first count): hashes of thread ids may share low bits.
  static std::atomic<size_t> threads{0};
  thread_local const size_t shard = threads.fetch_add(1, std::memory_order_relaxed) % kCountShards;
  part_samples_[shard * parts_.size() + source_->part_of(index)].value.fetch_add(1, std::memory_order_relaxed);
}

void DecodeStage::prepare(const std::vector<SampleWork*>& samples) {
  std::vector<SampleWork*> reading;
  std::vector<SampleContext> contexts;
  for (SampleWork* work : samples) {
    if (cache_ && cache_->contains(work->index())) continue;
    reading.push_back(work);
    contexts.push_back(SampleContext{transforms_.seed, work->plan->epoch, work->index(), {}, work->stop});
  }
  if (reading.empty()) return;
  std::vector<ReadResult> results = source_->read_samples(contexts);
  for (size_t i = 0; i < reading.size() && i < results.size(); ++i) {
    auto ahead = std::make_unique<ReadAhead>();
    ahead->index = contexts[i].index;
    ahead->read = std::move(results[i]);
    reading[i]->prepared = std::move(ahead);
  }
}

void DecodeStage::run(SampleWork& work) {
  // How far the reading got (Source::read_in_order), once this sample is done (read, decoded and
  // transformed, or failed). A replacement reads for the step of the sample it replaces, which counts it.
  struct Finished {
    ReadProgress* progress;
    const SampleWork& work;
    ~Finished() {
      if (progress != nullptr) progress->finish(work.plan->epoch, work.epoch_position());
    }
  } finished{work.replacement ? nullptr : progress_.get(), work};
  if (cache_ && cache_->contains(work.index())) {
    work.cached = true;
    count_part(work.index());
    return;
  }
  const std::vector<FieldSpec>& specs = source_->fields();
  EncodedSample encoded;
  // What prepare() read, if it read this sample (a replacement is another one).
  std::unique_ptr<PendingWork> prepared = std::move(work.prepared);
  if (auto* ahead = dynamic_cast<ReadAhead*>(prepared.get()); ahead != nullptr && ahead->index == work.index()) {
    if (ahead->read.error) std::rethrow_exception(ahead->read.error);
    encoded = std::move(ahead->read.sample);
  } else {
    encoded = source_->read_sample(work.index(),
                                   SampleContext{transforms_.seed, work.plan->epoch, work.index(), {}, work.stop});
  }
  work.key = encoded.key;
  if (encoded.fields.size() != specs.size()) {
    throw Error(encoded.key + ": the source gave " + std::to_string(encoded.fields.size()) +
                " fields, its schema has " + std::to_string(specs.size()));
  }
  work.fields.assign(decoded_.size(), at::Tensor());
  work.pending.clear();
  auto decode_field = [&](size_t i) {
    try {
      if (!on_gpu_.empty() && on_gpu_[i] && encoded.fields[i].defined()) {
        if (work.on_gpu && defer(work, i, encoded.fields[i])) return;  // run_pending() decodes it
        cpu_images_.fetch_add(1, std::memory_order_relaxed);
      }
      decode_into(work, i, encoded.fields[i]);
    } catch (const std::exception& e) {
      throw Error(encoded.key + ": field '" + specs[i].name + "' (decoder '" + std::string(decoders_[i]->name()) +
                  "'): " + cause_of(e));
    }
  };
  // A sample of many fields has them decoded on several threads (Note [wide batches]); not where a field
  // may be deferred to the GPU decoder, whose list of pending images is the sample's own.
  if (on_gpu_.empty()) {
    for_each_field(specs.size(), decode_field);
  } else {
    for (size_t i = 0; i < specs.size(); ++i) decode_field(i);
  }
  if (!transforms_.list.empty()) transform(work, encoded.key);
  if (work.pending.empty()) count_part(work.index());  // else once its GPU images decode (run_pending)
}

void DecodeStage::decode_into(SampleWork& work, size_t i, const at::Tensor& encoded, bool with_companions) const {
  const FieldSpec& spec = source_->fields()[i];
  const auto first = companions_[i].first;
  const size_t count = with_companions ? companions_[i].second : 0;
  if (!encoded.defined()) {  // a field the sample lacks (EncodedSample): zeros, its companions too
    for (size_t f = 0; f < count + 1; ++f) {
      const FieldSpec& zeroed = f == 0 ? spec : decoded_[first + f - 1];
      std::vector<int64_t> shape = zeroed.shape;
      for (int64_t& size : shape) size = std::max<int64_t>(size, 0);
      work.fields[f == 0 ? i : first + f - 1] = at::zeros(shape, at::TensorOptions().dtype(zeroed.dtype));
    }
    return;
  }
  std::vector<at::Tensor> companions;
  DecodeContext context{work.plan->epoch, work.index(), count != 0 ? &companions : nullptr};
  work.fields[i] = decoders_[i]->decode_sample(encoded, spec, context);
  check_decoded(work.fields[i], spec);
  if (companions.size() != count) {
    throw Error("the decoder gave " + std::to_string(companions.size()) + " companion fields, not the " +
                std::to_string(count) + " it declared");
  }
  for (size_t c = 0; c < count; ++c) {
    try {
      check_decoded(companions[c], decoded_[first + c]);
    } catch (const std::exception& e) {
      throw Error("its companion field '" + decoded_[first + c].name + "': " + cause_of(e));
    }
    work.fields[first + c] = std::move(companions[c]);
  }
}

void DecodeStage::transform(SampleWork& work, const std::string& key) const {
  std::vector<std::string> names;
  names.reserve(decoded_.size());
  for (const FieldSpec& spec : decoded_) names.push_back(spec.name);
  SampleFields sample(std::move(names), std::move(work.fields));
  const SampleContext context{transforms_.seed, work.plan->epoch, work.index(), key, work.stop};
  for (const auto& transform : transforms_.list) {
    try {
      transform->apply(sample, context);
    } catch (const std::exception& e) {
      throw Error(key + ": transform '" + std::string(transform->name()) + "': " + cause_of(e));
    }
  }
  // In the declared order, each as declared: the transforms' mistake is named here, not in collate.
  const std::string by = transforms_.list.size() == 1
                             ? "transform '" + std::string(transforms_.list.front()->name()) + "'"
                             : "the transforms";
  std::vector<at::Tensor> out(fields_.size());
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (!sample.has(fields_[i].name)) {
      throw Error(key + ": " + by + " left out the field '" + fields_[i].name + "' declared among their outputs");
    }
    out[i] = sample.at(fields_[i].name);
    // A field left to the GPU decoder (transforms_need()), made after this, in its place.
    if (!out[i].defined() && i < on_gpu_.size() && on_gpu_[i] && !work.pending.empty()) continue;
    try {
      check_decoded(out[i], fields_[i], kTransformMade);
    } catch (const std::exception& e) {
      throw Error(key + ": field '" + fields_[i].name + "' from " + by + ": " + cause_of(e));
    }
  }
  if (sample.names().size() != fields_.size()) {
    for (const std::string& name : sample.names()) {
      if (std::none_of(fields_.begin(), fields_.end(), [&](const FieldSpec& spec) { return spec.name == name; })) {
        throw Error(key + ": " + by + " made the field '" + name + "', which they did not declare");
      }
    }
  }
  work.fields = std::move(out);
}

}  // namespace ferry

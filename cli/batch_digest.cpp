#include "cli/batch_digest.h"

#include <cstdio>

#include <ATen/ATen.h>

#include <ferry/pipeline/error.h>

namespace ferry::cli {
namespace {

// FNV-1a, 64 bits: simple, stable across machines and versions, plenty to tell batches apart.
class Fnv1a {
 public:
  void add(const void* data, size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) hash_ = (hash_ ^ bytes[i]) * 0x100000001b3ULL;
  }
  std::string hex() const {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash_));
    return text;
  }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

}  // namespace

BatchDigest::BatchDigest(const std::string& path, uint64_t first_batch)
    : out_(path), path_(path), first_batch_(first_batch) {
  if (!out_) throw Error("--digest: cannot create '" + path + "'");
}

void BatchDigest::add(const Batch& batch) {
  Fnv1a indices;
  for (const uint64_t index : batch.sample_indices()) indices.add(&index, sizeof index);
  Fnv1a bytes;
  for (size_t f = 0; f < batch.size(); ++f) {
    const std::string& name = batch.names()[f];
    bytes.add(name.data(), name.size() + 1);  // with its terminating NUL
    const at::Tensor& tensor = batch.tensors()[f];
    const auto dtype = static_cast<int8_t>(tensor.scalar_type());
    bytes.add(&dtype, sizeof dtype);
    for (const int64_t size : tensor.sizes()) bytes.add(&size, sizeof size);
    const at::Tensor host = batch.tensors()[f].to(at::kCPU).contiguous();
    bytes.add(host.data_ptr(), host.nbytes());
  }
  // A separator after each name, and dtype and shape: batches of equal bytes but another layout differ.
  out_ << "batch " << first_batch_ + batch.sequence() << " epoch " << batch.epoch() << " index " << batch.index()
       << " samples " << batch.batch_size() << " indices " << indices.hex() << " bytes " << bytes.hex() << "\n";
  if (!out_) throw Error("--digest: cannot write to '" + path_ + "'");
}

void BatchDigest::finish() {
  out_.flush();
  if (!out_) throw Error("--digest: cannot write to '" + path_ + "'");
}

}  // namespace ferry::cli

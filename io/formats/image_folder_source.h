#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/io/formats/source.h"
#include "ferry/io/util/key_schema.h"

namespace ferry {

struct ImageFolderOptions {
  /// The folder holding one sub-folder per class: root/<class>/<file>, as torchvision's ImageFolder.
  std::string root;
  /// The files that count, by extension, without the dot, compared case-insensitively ("jpg" takes
  /// "a.JPG"). Several dots are fine ("seg.png").
  std::vector<std::string> extensions = {"jpg", "jpeg"};
  /// The image field: what its decoder makes of the file's bytes. The name defaults to "image"; the
  /// default spec is the bytes as stored (decoder "raw", uint8, variable length): images stay
  /// encoded until the spec names an image decoder ("jpeg" with shape [H, W, 3]).
  FieldSpec image{"image", at::kByte, {kVariableLength}, std::nullopt, "raw"};
};

/// The options of a config's `source: {kind: image_folder, ...}` mapping, as the config loader checked it.
ImageFolderOptions image_folder_options(const KeyValue& source);

/// Samples of a folder of images in torchvision's ImageFolder layout: root/<class>/<file>, files
/// found recursively below each class folder.
///
/// In: the root, the extensions that count and the image field's spec. The constructor scans the
/// folder once (on the calling thread): class folders sorted by name (byte order) get the class
/// indices 0..C-1; within a class, files are sorted by their path relative to the class folder;
/// samples are numbered class by class. Hidden files and folders (a name starting with '.') are
/// ignored, symbolic links are followed (a link to a folder above it, a loop, is not). Out: read(i)
/// gives sample i with two fields: the image spec's field (the file's bytes, 1-D uint8, read at
/// read() time) and "label" (the class index, an int64 0-d tensor that the "raw" decoder passes on
/// as it is). Keys are paths relative to root ("cat/0001.jpg").
///
/// Thread-safe: read() is const and takes no lock (open + pread + close into a fresh tensor); called
/// from the decode threads. Owns the list of relative paths (one string per sample) and the class
/// names; no file stays open.
class ImageFolderSource : public Source {
 public:
  /// Blocks on directory reads. Throws ferry::Error naming the path for a root that is missing or not
  /// a folder, an unreadable folder, no class folder, a class folder without any file of the
  /// extensions (torchvision refuses that too), no extensions, or a bad image spec (no name, "label",
  /// a negative dim other than a variable first one).
  explicit ImageFolderSource(ImageFolderOptions options);

  const std::vector<FieldSpec>& fields() const override { return specs_; }
  uint64_t size() const override { return paths_.size(); }
  /// Thread-safe, lock-free; blocks on I/O; allocates the two tensors. Throws ferry::Error for an
  /// index out of range, or a file that cannot be opened or read (naming it: a per-sample problem, so
  /// `on_error: skip` skips it).
  EncodedSample read(uint64_t index) const override;
  /// "image_folder(data/images, 10 classes, 1000 samples)", and how many entries named as images were
  /// left out for not being files (dangling links, FIFOs, devices).
  std::string describe() const override;
  /// The file's path below the root ("class-003/0042.jpg").
  std::string key(uint64_t index) const override;

  /// Entries with an image's extension that are not files (dangling links, FIFOs, devices): no samples.
  uint64_t entries_not_files() const noexcept { return not_files_; }
  /// The class folders' names, in class-index order.
  std::vector<std::string> class_names() const override { return class_names_; }
  /// The class index of sample `index`. Throws ferry::Error for an index out of range. O(log C).
  int64_t label(uint64_t index) const;
  const ImageFolderOptions& options() const noexcept { return options_; }

 private:
  ImageFolderOptions options_;
  std::vector<FieldSpec> specs_;
  std::vector<std::string> class_names_;
  std::vector<std::string> paths_;        // relative to root, in sample order
  std::vector<uint64_t> class_begin_{0};  // class c holds samples [class_begin_[c], class_begin_[c + 1])
  uint64_t not_files_ = 0;
};

}  // namespace ferry

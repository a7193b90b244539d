#include "ferry/io/formats/image_folder_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>

#include "ferry/io/util/regular_file.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string errno_text() { return std::strerror(errno); }

// Note [POSIX directory scan]
// The scan uses opendir/readdir/stat rather than std::filesystem: a test built on std::filesystem
// crashed when built with g++ 13 against a libtorch built with another libstdc++, and a source in the
// library must not bring that risk into every program that links ferry. readdir's d_type is not trusted
// (some filesystems say DT_UNKNOWN); stat() says what each entry is and follows symbolic links, as
// torchvision's os.walk(followlinks=True) does. Folders are identified by (device, inode), so a link
// back to a folder above it (a loop) is skipped instead of recursing forever; two links to one folder
// elsewhere give its files twice, as torchvision does.
struct DirEntry {
  enum class Kind { kFile, kDirectory, kNotAFile };
  std::string name;
  Kind kind = Kind::kFile;
  bool directory() const noexcept { return kind == Kind::kDirectory; }
};

// The entries of `path` that are not hidden ('.' first), sorted by name (byte order): folders and
// regular files (after following links), and what is neither (a dangling link, a FIFO, a device, an
// entry removed meanwhile), which can be no sample. Throws ferry::Error naming the path.
std::vector<DirEntry> list_folder(const std::string& path) {
  const std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(path.c_str()), &::closedir);  // closed on every path
  if (!dir) throw Error("image folder: cannot open the folder '" + path + "': " + errno_text());
  std::vector<DirEntry> entries;
  errno = 0;
  while (const dirent* entry = ::readdir(dir.get())) {
    const std::string name = entry->d_name;
    if (name.empty() || name[0] == '.') continue;  // ".", "..", and hidden entries
    struct stat info {};
    if (::stat((path + "/" + name).c_str(), &info) != 0 || !(S_ISDIR(info.st_mode) || S_ISREG(info.st_mode))) {
      entries.push_back({name, DirEntry::Kind::kNotAFile});
    } else {
      entries.push_back({name, S_ISDIR(info.st_mode) ? DirEntry::Kind::kDirectory : DirEntry::Kind::kFile});
    }
    errno = 0;
  }
  const int read_error = errno;
  if (read_error != 0) {
    throw Error("image folder: cannot read the folder '" + path + "': " + std::strerror(read_error));
  }
  std::sort(entries.begin(), entries.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return entries;
}

bool has_extension(std::string_view name, const std::vector<std::string>& extensions) {
  const std::string lowered = lower(name);
  for (const std::string& extension : extensions) {
    // The name must have something before ".ext": "jpg" alone is not a JPEG file.
    if (lowered.size() > extension.size() + 1 && lowered.ends_with(extension) &&
        lowered[lowered.size() - extension.size() - 1] == '.') {
      return true;
    }
  }
  return false;
}

// Appends to `out` the files below `folder` (given as `relative` to the class folder, "" at its top)
// whose extension counts, as paths relative to the class folder, and counts in `not_files` the entries
// with such an extension that are not files (said in the report: a sample the user meant and lost).
// Order does not matter here: the caller sorts.
void collect_files(const std::string& folder, const std::string& relative, const std::vector<std::string>& extensions,
                   std::vector<std::pair<dev_t, ino_t>>& above, std::vector<std::string>& out, uint64_t& not_files) {
  struct stat info {};
  if (::stat(folder.c_str(), &info) != 0)
    throw Error("image folder: cannot open the folder '" + folder + "': " + errno_text());
  const std::pair<dev_t, ino_t> id{info.st_dev, info.st_ino};
  if (std::find(above.begin(), above.end(), id) != above.end()) return;  // Note [POSIX directory scan]: a loop
  above.push_back(id);
  for (const DirEntry& entry : list_folder(folder)) {
    const std::string path = relative.empty() ? entry.name : relative + "/" + entry.name;
    if (entry.directory()) {
      collect_files(folder + "/" + entry.name, path, extensions, above, out, not_files);
    } else if (has_extension(entry.name, extensions)) {
      if (entry.kind == DirEntry::Kind::kFile) {
        out.push_back(path);
      } else {
        ++not_files;
      }
    }
  }
  above.pop_back();
}

// Closes a file descriptor when it goes out of scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

}  // namespace

ImageFolderSource::ImageFolderSource(ImageFolderOptions options) : options_(std::move(options)) {
  std::string& root = options_.root;
  if (root.empty()) throw Error("image folder: no root folder given");
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  struct stat info {};
  if (::stat(root.c_str(), &info) != 0) throw Error("image folder '" + root + "': " + errno_text());
  if (!S_ISDIR(info.st_mode)) throw Error("image folder '" + root + "' is not a folder");

  if (options_.extensions.empty()) throw Error("image folder '" + root + "': no file extensions given");
  for (std::string& extension : options_.extensions) {
    if (extension.starts_with('.')) extension.erase(0, 1);
    extension = lower(extension);
    if (extension.empty()) throw Error("image folder '" + root + "': an empty file extension");
  }

  FieldSpec& image = options_.image;
  const std::string field = "image folder '" + root + "': field '" + image.name + "'";
  if (image.name.empty()) throw Error("image folder '" + root + "': the image field has no name");
  if (image.name == "label") throw Error(field + ": the name 'label' is taken by the class index");
  if (image.decoder.empty()) throw Error(field + " names no decoder");
  for (size_t d = 0; d < image.shape.size(); ++d) {
    if (image.shape[d] < 0 && image.shape[d] != kVariableLength) {
      throw Error(field + ": a shape's sizes are >= 0, or null (" + std::to_string(kVariableLength) +
                  ") for one that varies per image");
    }
  }
  if (image.max_length && (!image.variable() || *image.max_length < 0)) {
    throw Error(field + ": max_length needs a variable first dim and must be >= 0");
  }
  specs_ = {image, FieldSpec{"label", at::kLong, {}, std::nullopt, "raw"}};

  std::vector<std::pair<dev_t, ino_t>> above{{info.st_dev, info.st_ino}};
  for (const DirEntry& entry : list_folder(root)) {
    if (!entry.directory()) continue;  // files at the top belong to no class (torchvision ignores them too)
    std::vector<std::string> files;
    collect_files(root + "/" + entry.name, "", options_.extensions, above, files, not_files_);
    if (files.empty()) {
      std::string extensions;
      for (const std::string& extension : options_.extensions)
        extensions += (extensions.empty() ? "." : ", .") + extension;
      throw Error("image folder '" + root + "': the class folder '" + entry.name + "' holds no file ending in " +
                  extensions + " (every class needs at least one; remove the folder or add files)");
    }
    std::sort(files.begin(), files.end());
    for (std::string& file : files) paths_.push_back(entry.name + "/" + file);
    class_names_.push_back(entry.name);
    class_begin_.push_back(paths_.size());
  }
  if (class_names_.empty()) {
    throw Error("image folder '" + root +
                "' holds no class folder (expected root/<class>/<file>, as torchvision's ImageFolder)");
  }
}

int64_t ImageFolderSource::label(uint64_t index) const {
  if (index >= size()) {
    throw Error("image folder '" + options_.root + "': sample " + std::to_string(index) + " is beyond its " +
                std::to_string(size()) + " samples");
  }
  // The last class whose first sample is <= index (no class is empty).
  const auto it = std::upper_bound(class_begin_.begin(), class_begin_.end(), index);
  return static_cast<int64_t>(it - class_begin_.begin()) - 1;
}

EncodedSample ImageFolderSource::read(uint64_t index) const {
  const int64_t class_index = label(index);  // checks the range
  const std::string& relative = paths_[index];
  const std::string path = options_.root + "/" + relative;
  std::string why;  // a file replaced by a FIFO since the listing must not block a decode thread
  const FileDescriptor fd(detail::open_regular_file(path, why));
  if (fd.get() < 0) throw Error("image folder: cannot open '" + path + "': " + why);
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) throw Error("image folder: cannot stat '" + path + "': " + errno_text());
  const auto bytes_total = static_cast<int64_t>(info.st_size);
  at::Tensor bytes = at::empty({bytes_total}, at::kByte);
  auto* data = static_cast<char*>(bytes.data_ptr());
  int64_t done = 0;
  while (done < bytes_total) {
    const ssize_t n = ::pread(fd.get(), data + done, static_cast<size_t>(bytes_total - done), static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("image folder: cannot read '" + path + "': " + errno_text());
    if (n == 0) {
      throw Error("image folder: '" + path + "' ended after " + std::to_string(done) + " of its " +
                  std::to_string(bytes_total) + " bytes (was it changed while being read?)");
    }
    done += n;
  }
  EncodedSample sample;
  sample.index = index;
  sample.key = relative;
  sample.fields.push_back(std::move(bytes));
  sample.fields.push_back(at::scalar_tensor(class_index, at::kLong));
  return sample;
}

std::string ImageFolderSource::key(uint64_t index) const {
  if (index >= paths_.size()) return std::to_string(index);
  return paths_[index];
}

std::string ImageFolderSource::describe() const {
  std::string text = "image_folder(" + options_.root + ", " + std::to_string(class_names_.size()) +
                     (class_names_.size() == 1 ? " class, " : " classes, ") + std::to_string(size()) + " samples";
  if (not_files_ != 0) {
    text += "; " + std::to_string(not_files_) + (not_files_ == 1 ? " entry" : " entries") +
            " with an image's name left out: not files (dangling links, FIFOs, devices)";
  }
  return text + ")";
}

}  // namespace ferry

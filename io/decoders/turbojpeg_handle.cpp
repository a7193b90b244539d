#include "ferry/io/decoders/turbojpeg_handle.h"

#include <memory>
#include <string>

#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

// Note [TurboJPEG handle per thread]
// A tjhandle holds libjpeg's compressor or decompressor state and its last error message, so one
// handle must not be used by two threads at once. Creating one per call costs an allocation of
// libjpeg's state (several KiB) and its setup on every image; a thread_local handle is created once
// per thread — oneTBB's workers and the decode threads live for the whole run — and reused. The
// handle is also where tjGetErrorStr2() reads the message from, so messages never mix between
// threads (the handle-less tjGetErrorStr() is one global buffer).
//
// A handle is reused only after a success. After a failure it is destroyed, and the thread's next
// image gets a fresh one: libjpeg-turbo 2.1's tjDecompressHeader3() returns from an error without
// aborting libjpeg's decompressor, so the next image's header is read as the continuation of the
// damaged one (a test saw "Bogus Huffman table definition" for a good file after bad ones), and no
// state of a failed compression should leak into the next either. Bad data is rare, so the cost of
// a new handle then does not matter. A handle is also destroyed when its thread exits.
//
// Progressive and baseline compression never share a handle: TurboJPEG 2.1 sets a progressive scan
// script in libjpeg's compressor and does not clear it, so a baseline file compressed after a
// progressive one on the same handle came out corrupt ("bad Huffman code"; the test
// JpegEncoder.BaselineProgressiveAndGrayFilesInTurnEachDecode).
struct Deleter {
  void operator()(void* handle) const noexcept { tjDestroy(handle); }
};
using Handle = std::unique_ptr<void, Deleter>;

Handle& slot(TurboJpegRole role) {
  thread_local Handle compressor;
  thread_local Handle progressive_compressor;
  thread_local Handle decompressor;
  switch (role) {
    case TurboJpegRole::kCompress: return compressor;
    case TurboJpegRole::kCompressProgressive: return progressive_compressor;
    case TurboJpegRole::kDecompress: break;
  }
  return decompressor;
}

}  // namespace

tjhandle turbojpeg_handle(TurboJpegRole role) {
  Handle& handle = slot(role);
  const bool compress = role != TurboJpegRole::kDecompress;
  if (!handle) handle.reset(compress ? tjInitCompress() : tjInitDecompress());
  if (!handle) {
    throw Error(std::string("TurboJPEG cannot create a ") + (compress ? "compressor" : "decompressor") + ": " +
                tjGetErrorStr2(nullptr));
  }
  return handle.get();
}

void discard_turbojpeg_handle(TurboJpegRole role) noexcept { slot(role).reset(); }

}  // namespace ferry

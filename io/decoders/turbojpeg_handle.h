#pragma once

// Private to io/'s JPEG code: includes TurboJPEG's header, which only ferry_io links against.
#include <turbojpeg.h>

namespace ferry {

/// What a TurboJPEG handle is made for.
/// kCompressProgressive has a handle of its own: libjpeg-turbo 2.1 keeps a progressive compression's
/// scan script in the handle, and a baseline file compressed next with that handle is corrupt.
enum class TurboJpegRole { kCompress, kCompressProgressive, kDecompress };

/// This thread's TurboJPEG handle for `role` (Note [TurboJPEG handle per thread] in the .cpp), made
/// on first use and kept until discarded or the thread exits. Throws ferry::Error when TurboJPEG
/// cannot make one. Use it from this thread only.
tjhandle turbojpeg_handle(TurboJpegRole role);

/// Destroys this thread's handle for `role`, so that the next use gets a fresh one: call it after a
/// failed TurboJPEG call.
void discard_turbojpeg_handle(TurboJpegRole role) noexcept;

}  // namespace ferry

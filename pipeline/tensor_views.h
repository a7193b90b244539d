#pragma once

#include <cstddef>

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

namespace ferry {

/// A contiguous tensor of `dtype` and `sizes` that views `storage` from `byte_offset` on.
///
/// Builds the TensorImpl directly instead of going through the dispatcher (narrow/view/as_strided):
/// a batch of 10 000 small fields makes 10 000 views, and the direct route costs a few hundred
/// nanoseconds each instead of microseconds. Every view shares `storage`, so the allocation lives
/// while any field does and one recordStream on it covers all fields. `storage` is taken by value: a
/// caller that counted the references beforehand moves them in (Note [wide batches]).
///
/// `byte_offset` must be a multiple of the element size and the view must fit in the storage;
/// violations throw ferry::Error. Allocates (the TensorImpl). Thread-safe.
at::Tensor make_view(c10::Storage storage, at::Device device, at::ScalarType dtype, size_t byte_offset,
                     at::IntArrayRef sizes);

}  // namespace ferry

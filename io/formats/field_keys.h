#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/io/util/key_schema.h"

// What the source kinds that declare fields in a config share about them: the `shape` key, and which
// of a field's decoder keys change its samples. Internal: not installed.

namespace ferry::detail {

/// A `shape` key: a list of sizes, each an integer >= 0 or null for a size that varies per sample
/// (`[null, 4]`: any number of rows of 4; `[null, null, 3]`: images of their own size).
KeySpec shape_key(std::string description, std::string default_value, std::string example);

/// `max_pixels`: the bound of an image field of [null, null, 3] (FieldSpec::max_length).
KeySpec max_pixels_key();

/// The paths a list of paths names (tar `shards`, jsonl `files`), `{000..009}` ranges expanded, in order.
std::vector<std::string> expanded_paths(const KeyValue& paths);

/// A shape as the key gives it, null sizes as kVariableLength.
std::vector<int64_t> shape_of(const KeyValue& shape);

/// The image decoder keys of a field's mapping that change its samples (resize, crop, flip, filter),
/// as text for the order a saved state records: "" when it sets none.
std::string image_order_text(const KeyValue& field);

}  // namespace ferry::detail

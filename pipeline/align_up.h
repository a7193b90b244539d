#pragma once

#include <cstddef>

namespace ferry {

/// `n` rounded up to a multiple of `to` (any positive value, not only powers of two). The one rule for
/// where a field, slot or slice starts: collate's layout and the slots the decode threads place samples
/// into (Note [placing samples]) must agree to the byte.
constexpr size_t align_up(size_t n, size_t to) noexcept { return (n + to - 1) / to * to; }

}  // namespace ferry

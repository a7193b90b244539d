#include "tests/support/random_nested.h"

#include <string>
#include <utility>
#include <vector>

namespace ferry::testing {

Nested random_nested(std::mt19937& rng, const NestedLeaves& leaves, int depth) {
  // Leaves only at depth 3; otherwise a leaf in 4 draws out of 7 (two of them tensors).
  const int pick = static_cast<int>(rng() % (depth >= 3 ? 4 : 7));
  switch (pick) {
    case 0:
    case 1: return leaves.tensor();
    case 2: return Nested();
    case 3: return leaves.opaque();
    case 4:
    case 5: {
      std::vector<Nested> elements(rng() % 5);
      for (Nested& element : elements) element = random_nested(rng, leaves, depth + 1);
      return pick == 4 ? Nested::list(std::move(elements)) : Nested::tuple(std::move(elements));
    }
    default: {
      Nested dict = Nested::dict();
      const size_t count = rng() % 5;
      for (size_t i = 0; i < count; ++i) {
        std::string key = "k";  // not "k" + ...: g++ 12 warns falsely (-Wrestrict) on that
        key += std::to_string(rng() % 1000);
        dict.set(std::move(key), random_nested(rng, leaves, depth + 1));
      }
      return dict;
    }
  }
}

}  // namespace ferry::testing

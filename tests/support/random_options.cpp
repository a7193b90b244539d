#include "tests/support/random_options.h"

namespace ferry::testing {

SyntheticOptions random_synthetic_options(std::mt19937_64& rng, uint64_t samples, int64_t min_fields,
                                          int64_t max_fields) {
  const at::ScalarType dtypes[] = {at::kByte, at::kInt, at::kLong, at::kHalf, at::kBFloat16, at::kFloat};
  auto uniform = [&rng](int64_t low, int64_t high) { return std::uniform_int_distribution<int64_t>(low, high)(rng); };
  SyntheticOptions options;
  options.seed = rng();
  options.samples = samples;
  const int64_t fields = uniform(min_fields, max_fields);
  for (int64_t f = 0; f < fields; ++f) {
    SyntheticField field;
    field.name = std::string("f").append(std::to_string(f));  // (not "f" + ...: a GCC 12 -Wrestrict false positive)
    field.dtype = dtypes[uniform(0, 5)];
    const int64_t rank = uniform(0, 3);
    field.variable = uniform(0, 9) < 4;
    // Empty dims only in fixed fields: a variable field's rows must hold at least one element.
    for (int64_t d = 0; d < rank; ++d)
      field.shape.push_back(!field.variable && uniform(0, 12) == 0 ? 0 : uniform(1, 6));
    if (field.variable) {
      field.min_length = uniform(0, 3);
      field.max_length = field.min_length + uniform(0, 20);
    }
    if (uniform(0, 1) == 1) {
      const double low = static_cast<double>(uniform(-50, 50));
      field.range = std::pair{field.dtype == at::kByte ? 0.0 : low, field.dtype == at::kByte ? 200.0 : low + 100.0};
    }
    options.fields.push_back(std::move(field));
  }
  return options;
}

}  // namespace ferry::testing

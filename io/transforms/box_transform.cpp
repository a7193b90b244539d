// The `boxes` transform: box targets that follow their image's resize, crop and flip.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "ferry/io/transforms/builtin_transforms.h"
#include "ferry/io/util/dtype_names.h"
#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

using Type = KeySpec::Type;

// Note [boxes follow the image]
// An image decoder with `window: true` reports, per sample, the region of the image its output shows
// (top, left, height, width, in the image's pixels), whether it flipped it, and the output's size
// (detail::window_values()). A box (x1, y1, x2, y2 in the image's pixels) maps through the same
// geometry: x' = (x - left) * out_w / width, y' = (y - top) * out_h / height, then clipped to the output
// and, when flipped, mirrored (x1', x2') = (out_w - x2', out_w - x1'). A box keeps the share of its area
// that stays inside the output; `keep: visible` drops a box with less than `min_visible` of it (any area
// at all by default, as torchvision's SanitizeBoundingBoxes drops boxes that became empty), and the rows
// of the fields that follow the boxes (labels, ids) go with it; `keep: all` keeps every box, clipped.
// The arithmetic is in double, rounded once to the field's dtype.
constexpr int64_t kWindowValues = 9;  // as detail::window_values() (io/decoders/image_window.h) writes them

class BoxTransform : public Transform {
 public:
  BoxTransform(std::string window, std::vector<std::string> boxes, std::vector<std::string> follow, bool keep_all,
               double min_visible, bool normalized)
      : window_(std::move(window)),
        boxes_(std::move(boxes)),
        follow_(std::move(follow)),
        keep_all_(keep_all),
        min_visible_(min_visible),
        normalized_(normalized) {}

  std::string_view name() const override { return "boxes"; }

  std::optional<std::vector<std::string>> fields_used() const override {
    std::vector<std::string> used{window_};
    used.insert(used.end(), boxes_.begin(), boxes_.end());
    used.insert(used.end(), follow_.begin(), follow_.end());
    return used;
  }

  std::vector<FieldSpec> output_fields(const std::vector<FieldSpec>& input) const override {
    const FieldSpec& window = field(input, window_);
    if (window.dtype != at::kFloat || window.shape != std::vector<int64_t>{kWindowValues}) {
      throw Error("field '" + window_ + "' is not an image's window (float32 [9]): give the image field `window: " +
                  "true`, which makes `<image>_window`");
    }
    for (const std::string& name : boxes_) {
      const FieldSpec& spec = field(input, name);
      if (!at::isFloatingType(spec.dtype) || spec.shape.size() != 2 || spec.shape[0] != kVariableLength ||
          spec.shape[1] != 4) {
        throw Error("field '" + name + "' holds " + dtype_name(spec.dtype) + " " + shape_text(spec.shape) +
                    "; boxes are a float field of shape [null, 4] (x1, y1, x2, y2 per row)");
      }
    }
    for (const std::string& name : follow_) {
      const FieldSpec& spec = field(input, name);
      if (!spec.variable()) {
        throw Error("field '" + name + "' follows the boxes, so it needs one row per box: a shape whose first size " +
                    "is null, found " + shape_text(spec.shape));
      }
    }
    return input;
  }

  void apply(SampleFields& sample, const SampleContext&) const override {
    const at::Tensor window = sample.at(window_).contiguous();
    const float* w = window.data_ptr<float>();
    const double top = w[0], left = w[1], height = w[2], width = w[3];
    const bool flip = w[4] != 0;
    const double image_h = w[5], image_w = w[6], out_h = w[7], out_w = w[8];
    // An empty window is an image the sample lacked (an optional member: zeros): nothing to show a box.
    const bool no_image = !(height > 0 && width > 0 && out_h > 0 && out_w > 0);
    const double scale_x = no_image ? 0.0 : out_w / width, scale_y = no_image ? 0.0 : out_h / height;
    // Which rows survive: the same for every box field (they hold the same objects) and the followers.
    std::vector<int64_t> kept;
    int64_t rows = -1;
    for (const std::string& name : boxes_) {
      const at::Tensor boxes = sample.at(name).to(at::kDouble).contiguous();
      const int64_t count = boxes.size(0);
      if (rows >= 0 && count != rows) {
        throw Error("box fields '" + boxes_.front() + "' and '" + name + "' hold " + std::to_string(rows) + " and " +
                    std::to_string(count) + " boxes");
      }
      rows = count;
      at::Tensor moved = at::empty({count, 4}, at::kDouble);
      const double* in = boxes.data_ptr<double>();
      double* out = moved.data_ptr<double>();
      std::vector<bool> visible(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) {
        double x1 = in[4 * i], y1 = in[4 * i + 1], x2 = in[4 * i + 2], y2 = in[4 * i + 3];
        if (normalized_) {
          x1 *= image_w;
          x2 *= image_w;
          y1 *= image_h;
          y2 *= image_h;
        }
        x1 = (x1 - left) * scale_x;
        x2 = (x2 - left) * scale_x;
        y1 = (y1 - top) * scale_y;
        y2 = (y2 - top) * scale_y;
        const double area = std::max(0.0, x2 - x1) * std::max(0.0, y2 - y1);
        x1 = std::clamp(x1, 0.0, out_w);
        x2 = std::clamp(x2, 0.0, out_w);
        y1 = std::clamp(y1, 0.0, out_h);
        y2 = std::clamp(y2, 0.0, out_h);
        const double inside = std::max(0.0, x2 - x1) * std::max(0.0, y2 - y1);
        visible[static_cast<size_t>(i)] = inside > 0 && inside >= min_visible_ * area;
        if (flip) {
          const double mirrored = out_w - x2;
          x2 = out_w - x1;
          x1 = mirrored;
        }
        if (normalized_) {
          x1 /= out_w;
          x2 /= out_w;
          y1 /= out_h;
          y2 /= out_h;
        }
        out[4 * i] = x1;
        out[4 * i + 1] = y1;
        out[4 * i + 2] = x2;
        out[4 * i + 3] = y2;
      }
      if (name == boxes_.front()) {
        for (int64_t i = 0; i < count; ++i) {
          if (!no_image && (keep_all_ || visible[static_cast<size_t>(i)])) kept.push_back(i);
        }
      }
      sample.set(name, moved.to(sample.at(name).scalar_type()));
    }
    for (const std::string& name : follow_) {
      if (sample.at(name).size(0) != rows) {
        throw Error("field '" + name + "' follows the boxes but holds " + std::to_string(sample.at(name).size(0)) +
                    " rows for " + std::to_string(rows) + " boxes");
      }
    }
    if (static_cast<int64_t>(kept.size()) == rows) return;
    const at::Tensor index = at::tensor(kept, at::kLong);
    for (const std::string& name : boxes_) sample.set(name, sample.at(name).index_select(0, index));
    for (const std::string& name : follow_) sample.set(name, sample.at(name).index_select(0, index));
  }

 private:
  static std::string shape_text(const std::vector<int64_t>& shape) {
    std::string text;
    for (const int64_t size : shape) {
      text += (text.empty() ? "" : ", ") + (size == kVariableLength ? std::string("null") : std::to_string(size));
    }
    return "[" + text + "]";
  }

  static const FieldSpec& field(const std::vector<FieldSpec>& input, const std::string& name) {
    for (const FieldSpec& spec : input) {
      if (spec.name == name) return spec;
    }
    std::string known;
    for (const FieldSpec& spec : input) known += (known.empty() ? "" : ", ") + spec.name;
    throw Error("the sample has no field '" + name + "' (its fields: " + known + ")");
  }

  std::string window_;
  std::vector<std::string> boxes_;
  std::vector<std::string> follow_;
  bool keep_all_;
  double min_visible_;
  bool normalized_;
};

KeySpec field_list(std::string name, std::string description, bool required, std::string example) {
  return {.name = std::move(name),
          .type = Type::kList,
          .description = std::move(description),
          .default_value = required ? "required" : "none",
          .required = required,
          .example = std::move(example),
          .min = required ? std::optional<double>(1) : std::nullopt,
          .item = {{.type = Type::kString, .min = 1, .expected = "a field name"}},
          .one_or_list = true,
          .expected = "a field name or a list of them",
          .type_text = "field name or list of field names"};
}

std::vector<std::string> names_of(const KeyValue* list) {
  std::vector<std::string> names;
  if (list != nullptr) {
    for (const KeyValue& item : list->items()) names.push_back(item.text());
  }
  return names;
}

}  // namespace

namespace detail {

TransformKind box_transform_kind() {
  TransformKind kind;
  kind.name = "boxes";
  kind.description =
      "Moves box targets (x1, y1, x2, y2 per row) with their image's resize, crop and flip, read from the image's "
      "window (`window: true` on the image field makes `<image>_window`); clips them to the output and drops the "
      "boxes that left it, with the rows of the fields that follow them.";
  kind.keys = {
      {.name = "window",
       .type = Type::kString,
       .description = "The image's window field: `<image>_window`, made by the image field's `window: true`.",
       .default_value = "required",
       .required = true,
       .example = "image_window",
       .min = 1,
       .expected = "a field name"},
      field_list("boxes", "The box fields: float, shape [null, 4], x1, y1, x2, y2 in the image's pixels.", true,
                 "[boxes]"),
      field_list("follow", "Fields of one row per box (labels, ids, areas) dropped with their boxes.", false,
                 "[labels]"),
      {.name = "keep",
       .type = Type::kChoice,
       .description = "visible: keep a box when at least `min_visible` of its area is inside the output (any "
                      "area at all by default); all: keep every box, clipped to the output (empty ones too).",
       .default_value = "visible",
       .example = "visible",
       .choices = {"visible", "all"}},
      {.name = "min_visible",
       .type = Type::kNumber,
       .description = "keep: visible: the share of a box's area (after the resize) that must stay inside the "
                      "output.",
       .default_value = "0 (any area)",
       .example = "0.25",
       .min = 0,
       .max = 1},
      {.name = "normalized",
       .type = Type::kBoolean,
       .description = "The boxes are fractions of the image's width and height (0..1), in and out, instead of "
                      "pixels.",
       .default_value = "false",
       .example = "true"},
  };
  kind.make = [](const KeyValue& keys) -> std::shared_ptr<const Transform> {
    return std::make_shared<BoxTransform>(keys.at("window").text(), names_of(keys.find("boxes")),
                                          names_of(keys.find("follow")), keys.text_or("keep", "visible") == "all",
                                          keys.number_or("min_visible", 0.0), keys.boolean_or("normalized", false));
  };
  kind.check = [](const KeyValue& keys, KeyProblems& problems) {
    if (const KeyValue* min = keys.find("min_visible"); min != nullptr && keys.text_or("keep", "visible") == "all") {
      problems.add(*min, "min_visible is for keep: visible (keep: all keeps every box)");
    }
  };
  return kind;
}

}  // namespace detail
}  // namespace ferry

// The `mix` source kind: sources of the same fields, mixed by weight (`source: {mix: [{weight, source}]}`).
#include "ferry/io/formats/builtin_source_kinds.h"
#include "ferry/io/formats/mixture_source.h"

namespace ferry {
namespace {

using Type = KeySpec::Type;

// Each part's source mapping, as the loader checked it (its `kind` among its keys), and its kind.
struct PartKeys {
  const KeyValue* source;
  std::shared_ptr<const SourceKind> kind;
};

std::vector<PartKeys> parts_of(const KeyValue& mixture) {
  std::vector<PartKeys> parts;
  for (const KeyValue& part : mixture.at("mix").items()) {
    const KeyValue& source = part.at("source");
    parts.push_back({&source, source_kind_of(source).first});
  }
  return parts;
}

MixtureSchedule::Mode mode_of(const KeyValue& mixture) {
  return mixture.text_or("mode", "smooth") == "megatron" ? MixtureSchedule::Mode::kMegatron
                                                         : MixtureSchedule::Mode::kSmooth;
}

std::string names_text(const std::vector<FieldSpec>& fields) {
  std::string text;
  for (const FieldSpec& field : fields) text += (text.empty() ? "" : ", ") + field.name;
  return "[" + text + "]";
}

void check_mixture(const KeyValue& mixture, KeyProblems& problems) {
  const KeyValue& mix = mixture.at("mix");
  bool any = false;
  for (const KeyValue& part : mix.items()) any = any || part.at("weight").number() > 0;
  if (!any) problems.add(mix, "every weight is 0: at least one source needs a weight above 0");
  // Fields the kinds tell from their keys alone are compared now, at the part that differs; the rest
  // (dtype, shape) when the sources are made.
  const std::vector<PartKeys> parts = parts_of(mixture);
  std::optional<std::vector<FieldSpec>> first;
  for (size_t k = 0; k < parts.size(); ++k) {
    if (parts[k].kind->name == "mix") {
      problems.add(*parts[k].source,
                   "a mixture inside a mixture: list its sources here, with their weights multiplied");
      continue;
    }
    // The first source's decoders decode every source's fields: the others must ask for the same.
    if (k > 0 && parts[k].kind->decoded_fields && parts[0].kind->decoded_fields) {
      const auto decoded = [](const PartKeys& part) {
        std::string text;
        for (const DecodedField& field : part.kind->decoded_fields(*part.source)) {
          text += field.name + ": " + field.decoder + (field.keys != nullptr ? " " + field.keys->yaml() : "") + "; ";
        }
        return text;
      };
      if (decoded(parts[k]) != decoded(parts[0])) {
        problems.add(*parts[k].source,
                     "a mixture's sources decode their fields alike (one decoder each): this one "
                     "decodes " +
                         decoded(parts[k]) + "the first " + decoded(parts[0]));
      }
    }
    if (!parts[k].kind->fields) continue;
    const std::vector<FieldSpec> fields = parts[k].kind->fields(*parts[k].source);
    if (!first) {
      first = fields;
    } else if (names_text(fields) != names_text(*first)) {
      problems.add(*parts[k].source, "a mixture's sources need the same fields: this one has " + names_text(fields) +
                                         ", an earlier one " + names_text(*first));
    }
  }
}

}  // namespace

namespace detail {

SourceKind mixture_source_kind() {
  SourceKind kind;
  kind.name = "mix";
  kind.description =
      "Sources of the same fields mixed by weight: each position of an epoch takes the source furthest behind its "
      "share, decided from the weights alone (no index over the data), so every stretch of "
      "ceil(1 / smallest share) samples holds each source's share to within about one sample. A source asked for "
      "more samples than it has is read again in a new order (upsampled). `kind` may be left out: `source: {mix: "
      "[...]}`.";
  kind.keys = {
      {.name = "mix",
       .type = Type::kList,
       .description = "The sources and their weights (any scale: they are normalized).",
       .default_value = "required",
       .required = true,
       .example = "[{weight: 0.7, source: {kind: synthetic, fields: [{name: x, dtype: int64, shape: [4]}]}}, {weight: "
                  "0.3, source: {kind: synthetic, seed: 1, fields: [{name: x, dtype: int64, shape: [4]}]}}]",
       .min = 1,
       .item = {{.name = "",
                 .type = Type::kMapping,
                 .keys = {{.name = "weight",
                           .type = Type::kNumber,
                           .description = "The source's share, against the others' weights.",
                           .default_value = "required",
                           .required = true,
                           .example = "0.7",
                           .min = 0,
                           .expected = "a number >= 0",
                           .missing = "the source's weight, e.g. 0.7"},
                          {.name = "source",
                           .type = Type::kSource,
                           .description = "The source: `kind` and its keys, as under `source:`.",
                           .default_value = "required",
                           .required = true,
                           .example = "{kind: megatron, prefix: data/tokens}",
                           .missing = "the source, e.g. {kind: tokens, path: train.bin}"}}}},
       .expected = "a list of {weight, source}",
       .type_text = "list of {weight, source}",
       .missing = "the sources, e.g. [{weight: 0.7, source: {...}}, {weight: 0.3, source: {...}}]"},
      {.name = "mode",
       .type = Type::kChoice,
       .description = "`smooth`: the weights read as the decimals they are written as, a schedule that repeats; "
                      "`megatron`: Megatron-LM's blending order, sample for sample (its cost grows with the "
                      "position it is asked for, as Megatron's index does).",
       .default_value = "smooth",
       .example = "megatron",
       .choices = {"smooth", "megatron"}},
      {.name = "samples",
       .type = Type::kInteger,
       .description = "Samples in one epoch of the mixture.",
       .default_value = "the sources' samples together",
       .example = "100000",
       .min = 1,
       .expected = "an integer >= 1",
       .type_text = "integer >= 1"},
  };
  kind.make_in = [](const KeyValue& mixture, const MakeContext& context) {
    std::vector<MixturePart> parts;
    const std::vector<PartKeys> keys = parts_of(mixture);
    for (size_t k = 0; k < keys.size(); ++k) {
      try {
        parts.push_back({mixture.at("mix").items()[k].at("weight").number(),
                         make_source_of(*keys[k].kind, *keys[k].source, context)});
      } catch (const Error& e) {
        throw Error("mixture source " + std::to_string(k) + " (" + keys[k].kind->name + "): " + e.cause());
      }
    }
    return std::make_shared<MixtureSource>(std::move(parts), mode_of(mixture), mixture.unsigned_or("samples", 0));
  };
  kind.check = check_mixture;
  kind.fields = [](const KeyValue& mixture) -> std::vector<FieldSpec> {
    const std::vector<PartKeys> parts = parts_of(mixture);
    return parts.front().kind->fields ? parts.front().kind->fields(*parts.front().source) : std::vector<FieldSpec>{};
  };
  // The first source's decoders decode every source's fields (their fields are the same).
  kind.decoded_fields = [](const KeyValue& mixture) -> std::vector<DecodedField> {
    const std::vector<PartKeys> parts = parts_of(mixture);
    return parts.front().kind->decoded_fields ? parts.front().kind->decoded_fields(*parts.front().source)
                                              : std::vector<DecodedField>{};
  };
  kind.order = [](const KeyValue& mixture, const Source& made) {
    const auto& mixed = dynamic_cast<const MixtureSource&>(made);
    std::map<std::string, std::string> order;
    const std::vector<PartKeys> parts = parts_of(mixture);
    for (size_t k = 0; k < parts.size(); ++k) {
      const std::string prefix = "source.mix[" + std::to_string(k) + "].";
      order[prefix + "weight"] = mixture.at("mix").items()[k].at("weight").text();
      order[prefix + "source.kind"] = parts[k].kind->name;
      order[prefix + "source.size"] = std::to_string(mixed.parts()[k].source->size());
      for (const auto& [key, value] : source_order(*parts[k].kind, *parts[k].source, *mixed.parts()[k].source)) {
        if (key == "source.kind") continue;
        order[prefix + key] = value;  // "source.path" -> "source.mix[k].source.path"
      }
    }
    order["source.mode"] = mixture.text_or("mode", "smooth");
    order["source.samples"] = std::to_string(mixed.epoch_samples());
    return order;
  };
  return kind;
}

}  // namespace detail
}  // namespace ferry

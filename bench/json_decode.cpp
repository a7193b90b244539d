// bench/json_decode: ferry's json decoder beside simdjson on the same documents, one thread, in one run.
//
//   json_decode [--docs 2000] [--seconds 1] [--out json_decode.json]
//
// Documents as detection datasets hold them: {"boxes": [[x1, y1, x2, y2], ...], "labels": [...],
// "image_id": ..., "file_name": "..."}, with 0..50 boxes of 2-decimal coordinates. Each side makes the
// same float32 [N, 4] tensor of /boxes: ferry's JsonDecoder("/boxes") (the whole document checked, then
// the value read as text, each number rounded once to float32), and simdjson's DOM parser (its SIMD
// parse, at_pointer("/boxes"), each number a double, then float: rounded twice, so now and then a value
// one float apart). It counts the documents whose tensors differ, then prints documents and megabytes per
// second, the best of three alternated rounds each. Built where simdjson is (Debian: libsimdjson-dev).
#include <ATen/ATen.h>
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <ferry/io/decoders/json_decoder.h>
#include <ferry/pipeline/error.h>
#include "bench_args.h"

namespace {

std::vector<std::string> make_documents(size_t count) {
  std::mt19937_64 rng(7);
  std::vector<std::string> docs;
  for (size_t d = 0; d < count; ++d) {
    const size_t boxes = rng() % 51;
    std::string text = "{\"image_id\": " + std::to_string(d) + ", \"file_name\": \"images/" + std::to_string(d) +
                       ".jpg\", \"boxes\": [";
    std::string labels = "[";
    for (size_t b = 0; b < boxes; ++b) {
      char box[96];
      std::snprintf(box, sizeof box, "%s[%.2f, %.2f, %.2f, %.2f]", b ? ", " : "", (rng() % 100000) / 100.0,
                    (rng() % 100000) / 100.0, (rng() % 100000) / 100.0, (rng() % 100000) / 100.0);
      text += box;
      labels += (b ? ", " : "") + std::to_string(rng() % 80);
    }
    docs.push_back(text + "], \"labels\": " + labels + "]}");
  }
  return docs;
}

at::Tensor bytes_of(const std::string& text) {
  at::Tensor out = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  std::memcpy(out.data_ptr(), text.data(), text.size());
  return out;
}

at::Tensor simdjson_boxes(simdjson::dom::parser& parser, const std::string& text) {
  const simdjson::dom::element doc = parser.parse(text);
  const simdjson::dom::array boxes = doc.at_pointer("/boxes").get_array();
  at::Tensor out = at::empty({static_cast<int64_t>(boxes.size()), 4}, at::kFloat);
  float* values = out.data_ptr<float>();
  for (const simdjson::dom::element box : boxes) {
    const simdjson::dom::array row = box.get_array();
    if (row.size() != 4) throw ferry::Error("a box of " + std::to_string(row.size()) + " values");
    for (const simdjson::dom::element value : row) *values++ = static_cast<float>(value.get_double().value());
  }
  return out;
}

template <typename F>
double per_second(double seconds, size_t docs, F&& decode) {
  size_t done = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (size_t d = 0; d < docs; ++d) decode(d);
    done += docs;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return static_cast<double>(done) / elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  size_t docs = 2000;
  double seconds = 1.0;
  std::string out = "json_decode.json";
  bench::BenchArgs("json_decode", "json_decode [--docs N] [--seconds S] [--out PATH]")
      .value("--docs", docs)
      .value("--seconds", seconds)
      .value("--out", out)
      .parse(argc, argv);
  const std::vector<std::string> texts = make_documents(docs);
  std::vector<at::Tensor> encoded;
  size_t bytes = 0;
  for (const std::string& text : texts) {
    encoded.push_back(bytes_of(text));
    bytes += text.size();
  }
  const ferry::JsonDecoder ferry_decoder("/boxes");
  const ferry::FieldSpec spec{"boxes", at::kFloat, {ferry::kVariableLength, 4}, std::nullopt, "json"};
  simdjson::dom::parser parser;
  size_t differing = 0;
  for (size_t d = 0; d < docs; ++d) {
    if (!ferry_decoder.decode(encoded[d], spec).equal(simdjson_boxes(parser, texts[d]))) ++differing;
  }
  double best_ferry = 0, best_simdjson = 0;
  for (int round = 0; round < 3; ++round) {  // alternated, the best of three each
    best_ferry = std::max(best_ferry,
                          per_second(seconds, docs, [&](size_t d) { (void)ferry_decoder.decode(encoded[d], spec); }));
    best_simdjson =
        std::max(best_simdjson, per_second(seconds, docs, [&](size_t d) { (void)simdjson_boxes(parser, texts[d]); }));
  }
  const double mean_bytes = static_cast<double>(bytes) / static_cast<double>(docs);
  std::printf("%zu documents of %.0f bytes on average (0..50 boxes), one thread; %zu gave different tensors\n", docs,
              mean_bytes, differing);
  std::printf("%-28s %12s %10s\n", "decoder", "docs/s", "MB/s");
  std::printf("%-28s %12.0f %10.1f\n", "ferry json, select /boxes", best_ferry, best_ferry * mean_bytes / 1e6);
  std::printf("%-28s %12.0f %10.1f\n", "simdjson DOM, at_pointer", best_simdjson, best_simdjson * mean_bytes / 1e6);
  std::ofstream json(out);
  json << "{\"benchmark\": \"json_decode\", \"documents\": " << docs << ", \"mean_bytes\": " << mean_bytes
       << ", \"differing\": " << differing << ", \"ferry_docs_per_second\": " << best_ferry
       << ", \"simdjson_docs_per_second\": " << best_simdjson << "}\n";
  return 0;
}

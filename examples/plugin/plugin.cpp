// The plugin's entry point: what `plugins: [libferry_records.so]`, `ferry --plugin` and
// ferry.load_plugin() call once the library is loaded and its build checked.
#include "extensions.h"

FERRY_PLUGIN(registrar) {
  registrar.add_source_kind(records::csv_source_kind());
  registrar.add_decoder(records::text_numbers_decoder_kind());
  registrar.add_transform(records::split_label_transform_kind());
}

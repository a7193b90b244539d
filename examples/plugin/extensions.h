// The three extensions of this example plugin, one per file, which plugin.cpp registers.
#pragma once

#include <ferry/assembly/plugin.h>

namespace records {

/// Source kind `csv`: a text file of records, one per line, `columns` numbers each.
ferry::SourceKind csv_source_kind();
/// Decoder `text_numbers`: a line of text to a float32 tensor of the field's [columns] numbers.
ferry::DecoderKind text_numbers_decoder_kind();
/// Transform `split_label`: one column of a record becomes an int64 `label`, the others `features`.
ferry::TransformKind split_label_transform_kind();

}  // namespace records

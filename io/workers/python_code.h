#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/io/formats/source.h"
#include "ferry/io/util/key_schema.h"
#include "ferry/io/util/kind_registry.h"
#include "ferry/io/workers/worker_pool.h"

// What the python source kind and the python transform share: their worker processes' setup, fields as
// ferry/_worker.py reads and writes them, and objects handed over by the Python package. Internal.

namespace ferry::detail {

/// `text` as a JSON string literal; a byte that is not UTF-8 as Python's surrogateescape reads it (\udcXX).
std::string json_string(std::string_view text);
/// A config value as JSON: YAML scalars as what they read as (true, 3, 2.5, null, text).
std::string json_value(const KeyValue& value);
/// Fields as ferry/_worker.py's setup lists them: [{"name", "dtype", "shape", "max_length"}], shape with
/// -1 first for a variable-length field.
std::string json_fields(const std::vector<FieldSpec>& fields);

/// The fields a `fields:` list declares ({name, dtype, shape, max_length}), in order.
std::vector<FieldSpec> declared_fields(const KeyValue& list);
/// The `fields:` key of the python source and transform.
KeySpec fields_key(std::string description);
/// Problems of a `fields:` list that its schema cannot state (a name twice).
void check_declared_fields(const KeyValue& list, KeyProblems& problems);

/// The most bytes a sample of `fields` takes in a worker's slot (each field 64-byte aligned); nullopt
/// when a variable-length field has no max_length.
std::optional<uint64_t> slot_bytes(const std::vector<FieldSpec>& fields);

/// The setup every worker of a pool gets: its role and the JSON keys after it.
WorkerSetup worker_setup(const MakeContext& context, std::string what, std::string json, std::string payload);

/// An object the Python package hands to a pipeline (ferry.Pipeline.from_dataset): pickled, and named in
/// the config by a handle ("<object 3: TeamDataset>") that holds it until released. Process-wide and
/// thread-safe.
struct HeldObject {
  std::string payload;      // the pickled object, with what a spawned worker needs to unpickle it
  std::string description;  // what it is, for messages and the order a saved state records
};
/// Holds `object` and returns its handle.
std::string hold_object(HeldObject object);
/// The object `handle` names, or nullopt (released, or not a handle).
std::optional<HeldObject> held_object(const std::string& handle);
void release_object(const std::string& handle);
/// Whether `text` has the form of a handle (whether or not it is held).
bool is_object_handle(const std::string& text);

/// The interpreter and package folder worker processes use unless decode.python says otherwise: the
/// FERRY_PYTHON environment variable or python3; the Python package sets its own interpreter.
std::pair<std::string, std::string> default_worker_python();
void set_default_worker_python(std::string python, std::string python_path);

}  // namespace ferry::detail

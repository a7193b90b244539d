#!/usr/bin/env python3
"""Checks a JSON document against a JSON Schema, using the standard library only.

    check_json_schema.py SCHEMA DOCUMENT

Exit status: 0 valid, 1 invalid (each problem printed with its path), 2 unusable input.

It understands the subset of JSON Schema draft 2020-12 that docs/report.schema.json uses: type
(a name or a list), properties, required, additionalProperties (false or a schema), items, minimum,
maximum, enum, const, and the annotations $schema, title, description, $comment. Any other keyword
in the schema is an error rather than silently ignored, so a typo cannot make a check pass.

Beyond the schema it rejects what Python's json module would otherwise let through: NaN and
infinities (not JSON) and duplicate keys (ambiguous).
"""

import json
import sys

ANNOTATIONS = {"$schema", "title", "description", "$comment"}
KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "minimum", "maximum", "enum", "const"}


def type_matches(value, name):
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    raise SchemaError(f"unknown type name {name!r}")


class SchemaError(Exception):
    pass


def same(a, b):
    """JSON equality: 1 == 1.0, but true != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def validate(value, schema, path, problems):
    if not isinstance(schema, dict):
        raise SchemaError(f"{path}: a schema must be an object")
    unknown = set(schema) - KEYWORDS - ANNOTATIONS
    if unknown:
        raise SchemaError(f"{path}: unsupported schema keywords {sorted(unknown)}")

    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(type_matches(value, name) for name in names):
            problems.append(f"{path}: expected {' or '.join(names)}, found {json.dumps(value)[:80]}")
            return  # the other keywords would only repeat the mismatch
    if "const" in schema and not same(value, schema["const"]):
        problems.append(f"{path}: expected {json.dumps(schema['const'])}, found {json.dumps(value)[:80]}")
    if "enum" in schema and not any(same(value, option) for option in schema["enum"]):
        problems.append(f"{path}: {json.dumps(value)[:80]} is not one of {json.dumps(schema['enum'])}")

    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if is_number and "minimum" in schema and value < schema["minimum"]:
        problems.append(f"{path}: {value} is below the minimum {schema['minimum']}")
    if is_number and "maximum" in schema and value > schema["maximum"]:
        problems.append(f"{path}: {value} is above the maximum {schema['maximum']}")

    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{path}: missing required key {name!r}")
        for name, item in value.items():
            where = f"{path}.{name}"
            if name in properties:
                validate(item, properties[name], where, problems)
            elif schema.get("additionalProperties", True) is False:
                problems.append(f"{path}: unexpected key {name!r}")
            elif isinstance(schema.get("additionalProperties"), dict):
                validate(item, schema["additionalProperties"], where, problems)

    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            validate(item, schema["items"], f"{path}[{index}]", problems)


def load(path):
    def no_constants(name):
        raise ValueError(f"{name} is not JSON")

    def no_duplicates(pairs):
        seen = {}
        for key, item in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen[key] = item
        return seen

    with open(path, encoding="utf-8") as file:
        return json.load(file, parse_constant=no_constants, object_pairs_hook=no_duplicates)


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        schema = load(argv[1])
    except (OSError, ValueError) as error:
        print(f"{argv[1]}: cannot read the schema: {error}", file=sys.stderr)
        return 2
    try:
        document = load(argv[2])
    except (OSError, ValueError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        print(f"{argv[2]}: not a JSON document: {error}", file=sys.stderr)
        return 1
    problems = []
    try:
        validate(document, schema, "$", problems)
    except SchemaError as error:
        print(f"{argv[1]}: {error}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"{argv[2]}: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

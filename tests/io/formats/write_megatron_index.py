#!/usr/bin/env python3
"""Writes a Megatron-LM indexed dataset (<prefix>.bin + <prefix>.idx) with numpy, the way
Megatron-LM's IndexedDatasetBuilder and _IndexWriter do (megatron/core/datasets/indexed_dataset.py):
an implementation independent of ferry's C++ writer, for indexed_dataset_test to read.

    write_megatron_index.py SPEC.json PREFIX

SPEC.json: {"dtype": "uint16", "documents": [[[1, 2, 3], [4]], [], ...], "modes": null | [0, 1, ...]}
Each document is a list of sequences, each sequence a list of token ids. "modes", when given, holds
one int8 per sequence (Megatron's multimodal index).
"""
import json
import struct
import sys

import numpy

# Megatron's DType codes.
CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6, "float32": 7, "uint16": 8}


def main():
    spec_path, prefix = sys.argv[1], sys.argv[2]
    with open(spec_path) as f:
        spec = json.load(f)
    dtype = getattr(numpy, spec["dtype"])
    itemsize = numpy.dtype(dtype).itemsize

    # IndexedDatasetBuilder: tokens to the .bin as they come, lengths and document indices kept.
    sequence_lengths = []
    document_indices = [0]
    with open(prefix + ".bin", "wb") as data_file:
        for document in spec["documents"]:
            for sequence in document:
                array = numpy.array(sequence, dtype=dtype)
                data_file.write(array.tobytes(order="C"))
                sequence_lengths.append(array.size)
            document_indices.append(len(sequence_lengths))

    # _IndexWriter._sequence_pointers: the running byte offset of each sequence.
    pointers = []
    current = 0
    for length in sequence_lengths:
        pointers.append(current)
        current += length * itemsize

    # _IndexWriter.__enter__ and write().
    with open(prefix + ".idx", "wb") as index:
        index.write(b"MMIDIDX\x00\x00")
        index.write(struct.pack("<Q", 1))
        index.write(struct.pack("<B", CODES[spec["dtype"]]))
        index.write(struct.pack("<Q", len(sequence_lengths)))
        index.write(struct.pack("<Q", len(document_indices)))
        index.write(numpy.array(sequence_lengths, dtype=numpy.int32).tobytes(order="C"))
        index.write(numpy.array(pointers, dtype=numpy.int64).tobytes(order="C"))
        index.write(numpy.array(document_indices, dtype=numpy.int64).tobytes(order="C"))
        if spec.get("modes") is not None:
            index.write(numpy.array(spec["modes"], dtype=numpy.int8).tobytes(order="C"))


if __name__ == "__main__":
    main()

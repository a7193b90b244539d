"""Run from outside the source tree with a venv's python, after `pip install .`: ferry comes from the
venv, runs a pipeline whose batches equal what the config describes, and copies with start_copy.
Usage: pip_check.py VENV"""

import pathlib
import sys

import torch

import ferry

venv = pathlib.Path(sys.argv[1]).resolve()
where = pathlib.Path(ferry.__file__).resolve()
assert venv in where.parents, f"ferry was imported from {where}, not from the venv {venv}"
assert (where.parent / "py.typed").exists() and (where.parent / "_C.pyi").exists(), "the stubs were not installed"

config = {
    "source": {"kind": "synthetic", "samples": 100, "seed": 3,
               "fields": [{"name": "x", "dtype": "int64", "shape": [5]}, {"name": "y", "dtype": "float32", "shape": [2, 3]}]},
    "batch_size": 16,
    "transfer": {"device": "cpu"},
}
with ferry.Pipeline(config) as pipeline:
    batches = [dict(batch) for batch in pipeline]
assert len(batches) == 7, len(batches)  # 100 samples in batches of 16
assert [tuple(b["x"].shape) for b in batches] == [(16, 5)] * 6 + [(4, 5)]
assert batches[0]["y"].dtype == torch.float32 and tuple(batches[0]["y"].shape) == (16, 2, 3)
# The same config gives the same bytes again.
with ferry.Pipeline(config) as again:
    for first, second in zip(batches, again):
        assert all(torch.equal(first[k], second[k]) for k in ("x", "y"))

data = {"a": torch.arange(10), "b": [torch.randn(3, 4), torch.ones(2, dtype=torch.uint8)], "meta": "shard-3"}
copied = ferry.start_copy(data, "cpu").get()
assert copied["meta"] == "shard-3"
assert torch.equal(copied["a"], data["a"]) and torch.equal(copied["b"][0], data["b"][0])
assert torch.equal(copied["b"][1], data["b"][1])
# Text: the wheel carries the sentencepiece module beside the extension (when built with sentencepiece)
# and loads it from there, with no environment variable to point at it.
module = where.parent / "libferry_sentencepiece.so"
if module.exists():
    import json
    import os
    import tempfile
    os.environ.pop("FERRY_SENTENCEPIECE_MODULE", None)
    model = pathlib.Path(__file__).resolve().parents[1] / "data" / "sentencepiece-32.model"
    with tempfile.TemporaryDirectory() as folder:
        lines = pathlib.Path(folder) / "t.jsonl"
        lines.write_text(json.dumps({"text": "the cat sat on a mat"}) + "\n")
        field = {"name": "ids", "key": "text", "decoder": "sentencepiece", "model": str(model), "dtype": "int64",
                 "shape": [12], "pad_id": -1}
        with ferry.Pipeline({"source": {"kind": "jsonl", "files": str(lines), "fields": [field]}, "batch_size": 1,
                             "transfer": {"device": "cpu"}}) as pipeline:
            ids = next(iter(pipeline))["ids"][0].tolist()
    try:
        import sentencepiece
        expected = sentencepiece.SentencePieceProcessor(model_file=str(model)).encode("the cat sat on a mat")
        assert ids == expected + [-1] * (12 - len(expected)), (ids, expected)
    except ImportError:
        assert 0 < sum(i >= 0 for i in ids) < 12, ids
    print(f"sentencepiece from the wheel's {module.name}: {ids}")
print(f"pip-installed ferry {ferry.__version__} ({ferry.build_kind} build) from {where.parent}: "
      f"{len(batches)} batches as configured, start_copy of {len(data)} entries ok")

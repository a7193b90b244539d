"""stats.trace from Python: the run as a Chrome trace-event file, as `ferry run --trace` writes it."""

import json

import ferry

CONFIG = {
    "source": {"kind": "synthetic", "samples": 96, "seed": 2,
               "fields": [{"name": "x", "dtype": "float32", "shape": [5]}]},
    "batch_size": 8,
    "decode": {"threads": 2},
    "sampler": {"epochs": 2},
}


def test_a_trace_has_every_stage_of_every_batch_and_matches_the_stats(tmp_path):
    path = tmp_path / "trace.json"
    with ferry.Pipeline(CONFIG, overrides={"stats.trace": str(path)}) as pipeline:
        taken = [(batch.epoch, batch.index) for epoch in range(2) for batch in pipeline]
        stats = pipeline.stats()
        device = str(pipeline.device)
    events = json.loads(path.read_text())
    assert len(taken) == 24
    stages = {stage["name"]: stage for stage in stats["stages"]}
    for name in ("collate", "pack", "h2d", "event-wait"):
        spans = [e for e in events if e["ph"] == "X" and e["name"] == name]
        assert len(spans) == stages[name]["items_out"], name
        assert {(e["args"]["epoch"], e["args"]["batch"]) for e in spans} >= set(taken), name
    tokens = [e["args"]["batches"] for e in events if e["ph"] == "C" and e["name"] == "batches holding a prefetch token"]
    assert max(tokens) == stats["queues"]["in_flight"]["peak"]
    names = [e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert names == [f"ferry {device}"]
    # The consumer's waits are this (Python) thread's, and add up to no more than the report says.
    waited = sum(e["dur"] for e in events if e["ph"] == "X" and e["name"] == "wait in next()")
    assert waited <= stats["consumer"]["wait_seconds"] * 1e6 + 1.0


def test_a_trace_path_in_a_missing_folder_is_a_config_error(tmp_path):
    try:
        ferry.Pipeline(CONFIG, overrides={"stats.trace": str(tmp_path / "missing" / "t.json")})
    except ferry.ConfigError as e:
        assert "stats.trace" in str(e) and "missing" in str(e)
    else:
        raise AssertionError("no ConfigError")

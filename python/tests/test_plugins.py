"""Plugins from Python: ferry.load_plugin() with examples/plugin (a csv source kind, the text_numbers decoder,
the split_label transform), its values checked against the CSV file; and plugins that are wrong, each refused
with ferry.PluginError naming the reason, nothing of it registered."""

import os
import subprocess
import sys

import pytest
import torch

import ferry

PLUGIN = os.environ.get("FERRY_EXAMPLE_PLUGIN", "")
BAD = os.environ.get("FERRY_BAD_PLUGINS", "")
SOURCE_DIR = os.environ.get("FERRY_SOURCE_DIR",
                            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXAMPLE = os.path.join(SOURCE_DIR, "examples", "plugin")

pytestmark = pytest.mark.skipif(not os.path.exists(PLUGIN), reason="FERRY_EXAMPLE_PLUGIN: the example plugin not built")


def test_the_example_plugin_delivers_every_value_of_its_csv_file():
    # The example's own check, as a user runs it: its config, its data, every value against the file.
    done = subprocess.run([sys.executable, "check.py", PLUGIN, "records.yaml", "--set", "decode.threads=3"],
                          cwd=EXAMPLE, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "checked 20 batches, 200 samples of 100 records" in done.stdout, done.stdout


def test_a_dict_config_names_the_plugins_kinds_after_load_plugin(tmp_path):
    ferry.load_plugin(PLUGIN)
    ferry.load_plugin(PLUGIN)  # loaded once
    assert ferry.loaded_plugins().count(os.path.realpath(PLUGIN)) == 1
    records = tmp_path / "r.csv"
    records.write_text("1;2;3\n4;5;6\n7;8;9\n")
    config = {"source": {"kind": "csv", "path": str(records), "columns": 3, "separator": ";"},
              "transforms": [{"kind": "split_label", "label": 0}],
              "batch_size": 2, "transfer": {"device": "cpu"}}
    with ferry.Pipeline(config) as pipeline:
        batches = list(pipeline)
    assert [b["label"].tolist() for b in batches] == [[1, 4], [7]]
    assert torch.equal(batches[0]["features"], torch.tensor([[2.0, 3.0], [5.0, 6.0]]))
    with pytest.raises(ferry.ConfigError, match=r"source.separator: expected one character, found ';;'"):
        ferry.Pipeline(dict(config, source=dict(config["source"], separator=";;")))
    with pytest.raises(ferry.ConfigError, match=r"transforms\[0\].lable: unknown key \(did you mean 'label'\?\)"):
        ferry.Pipeline(dict(config, transforms=[{"kind": "split_label", "lable": 0}]))


def test_a_bad_record_names_its_line_or_is_skipped(tmp_path):
    ferry.load_plugin(PLUGIN)
    records = tmp_path / "r.csv"
    records.write_text("1,2\n3,x\n5,6\n")
    config = {"source": {"kind": "csv", "path": str(records), "columns": 2}, "batch_size": 1,
              "transfer": {"device": "cpu"}}
    with ferry.Pipeline(config) as pipeline:
        with pytest.raises(ferry.Error, match=r"r.csv:2: field 'record' \(decoder 'text_numbers'\): column 2: 'x' is not"):
            list(pipeline)
    with ferry.Pipeline(dict(config, decode={"on_error": "skip"})) as pipeline:
        assert [b["record"].tolist() for b in pipeline] == [[[1.0, 2.0]], [[5.0, 6.0]]]


@pytest.mark.parametrize("name, reason", [
    ("not_a_plugin", "is not a ferry plugin"),
    ("other_version", "was built against ferry 0.0.9 (libtorch 2.1.0), but this is ferry " + ferry.__version__),
    ("throws_on_register", "failed while registering its extensions: cannot find its model file"),
    ("takes_a_taken_name", "a decoder named 'raw' is already registered (built in)"),
])
def test_a_bad_plugin_raises_plugin_error_naming_why(name, reason):
    path = os.path.join(BAD, f"lib{name}.so")
    with pytest.raises(ferry.PluginError) as raised:
        ferry.load_plugin(path)
    assert f"plugin '{path}'" in str(raised.value) and reason in str(raised.value), str(raised.value)
    assert isinstance(raised.value, ferry.Error)
    assert path not in ferry.loaded_plugins()


def test_a_missing_or_a_text_file_is_refused(tmp_path):
    with pytest.raises(ferry.PluginError, match="no such file"):
        ferry.load_plugin(str(tmp_path / "libnone.so"))
    text = tmp_path / "libtext.so"
    text.write_text("hello\n")
    with pytest.raises(ferry.PluginError, match="cannot be loaded as a shared library"):
        ferry.load_plugin(str(text))

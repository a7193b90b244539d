"""Text tokenized in the loader: JSON-lines strings and tar text members through the sentencepiece
decoder, every id checked against the sentencepiece Python module."""

import io
import json
import random
import tarfile

import pytest
import torch

import ferry
from conftest import bytes_digest, ferry_run_digests

spm = pytest.importorskip("sentencepiece")

# No long runs of one character: they segment into equal-scoring pieces, which sentencepiece 0.1 and
# 0.2 break differently (ferry's is Debian's 0.1.97; a pip-installed module may be 0.2).
WORDS = ["the", "cat", "sat", "on", "a", "mat", "data", "loader", "keeps", "GPUs", "fed", "über", "naïve",
         "日本語", "tokens", "supercalifragilisticexpialidocious", "Ω", "quoted \"words\"", "tab\there", "\U0001F600"]


def random_texts(count, seed):
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.choice([0, 1, 3, 10, 30, 80]))) for _ in range(count)]
    texts[0] = ""
    return texts


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spm")
    (folder / "corpus.txt").write_text("\n".join(random_texts(3000, 1)[1:]) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(folder / "corpus.txt"), model_prefix=str(folder / "m"),
                                   vocab_size=64, minloglevel=2)
    path = folder / "m.model"
    # A build without libsentencepiece, or a sanitizer build beside a global protobuf, has no sentencepiece: it says so.
    (folder / "probe.jsonl").write_text('{"text": "a"}\n')
    probe = {"source": {"kind": "jsonl", "files": str(folder / "probe.jsonl"), "fields": [
        {"name": "ids", "key": "text", "decoder": "sentencepiece", "model": str(path), "dtype": "int64", "shape": [4]}]}}
    try:
        ferry.Pipeline(probe).close()
    except ferry.ConfigError as error:
        if "sentencepiece module" in str(error) or "without sentencepiece" in str(error) or "sanitizer" in str(error):
            pytest.skip(str(error))
        raise
    return path, spm.SentencePieceProcessor(model_file=str(path))


def expected_ids(sp, text, length, bos, eos, pad=None):
    """What the decoder should give: the module's ids cut to make room for BOS and EOS, then padded."""
    room = length - bos - eos
    ids = ([sp.bos_id()] if bos else []) + sp.encode(text)[:room] + ([sp.eos_id()] if eos else [])
    return ids if pad is None else ids + [pad] * (length - len(ids))


def write_jsonl(path, texts):
    """One object per line, some written with \\u escapes, a blank line in the middle and at the end."""
    lines = [json.dumps({"id": i, "text": t, "scores": [i, -i]}, ensure_ascii=i % 2 == 0) for i, t in enumerate(texts)]
    lines.insert(len(lines) // 2, "")
    path.write_text("\n".join(lines) + "\n\n", encoding="utf-8")


def line_texts(path):
    """The text of each line number (1-based), from the file as written."""
    return {n: json.loads(line)["text"] for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1)
            if line.strip()}


def spm_field(model_path, **keys):
    return {"name": "ids", "key": "text", "decoder": "sentencepiece", "model": str(model_path), **keys}


@pytest.mark.parametrize("length,bos,eos,dtype,threads", [
    (16, True, True, "int64", 1), (48, False, True, "int32", 3), (7, True, False, "int64", 2), (200, False, False, "int64", 4)])
def test_jsonl_text_is_the_modules_ids_cut_and_padded(tmp_path, model, length, bos, eos, dtype, threads):
    path, sp = model
    write_jsonl(tmp_path / "train.jsonl", random_texts(300, length))
    texts = line_texts(tmp_path / "train.jsonl")
    field = spm_field(path, dtype=dtype, shape=[length], add_bos=bos, add_eos=eos, pad_id=-100)
    config = {"source": {"kind": "jsonl", "files": str(tmp_path / "train.jsonl"), "fields": [field]}, "batch_size": 32,
              "sampler": {"shuffle": True}, "decode": {"threads": threads}}
    seen = []
    with ferry.Pipeline(config) as pipeline:
        for batch in pipeline:
            ids = batch["ids"].cpu()
            assert ids.dtype == getattr(torch, dtype) and ids.shape[1] == length
            for row, key in zip(ids.tolist(), batch.sample_keys):
                line = int(key.rsplit(":", 1)[1])
                assert row == expected_ids(sp, texts[line], length, bos, eos, pad=-100), (key, texts[line])
                seen.append(line)
    assert sorted(seen) == sorted(texts)


LONG_WORDS = WORDS + ["e\u0301", "\u0301", "a\u00a0b", "\u3000", "Ｆｕｌｌ", "ﬁne", "x  y", "end.\nnext", "(1)", "-", "\u2581"]


@pytest.mark.parametrize("trainer", [{}, {"treat_whitespace_as_suffix": True}, {"split_by_whitespace": False},
                                     {"allow_whitespace_only_pieces": True, "remove_extra_whitespaces": False},
                                     {"normalization_rule_tsv": "e c -> z"}])
def test_long_texts_cut_short_are_the_modules_first_ids_for_models_trained_any_way(tmp_path, model, trainer):
    del model  # its fixture skips where ferry has no sentencepiece
    # Only the start of a long text is encoded where the model allows: its ids must still be the first ids of
    # the whole text's, whatever the model, the characters about the cut and the length kept.
    rng = random.Random(7)
    texts = [" ".join(rng.choice(LONG_WORDS) for _ in range(rng.randrange(50, 400))) for _ in range(120)]
    (tmp_path / "corpus.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    if "normalization_rule_tsv" in trainer:  # a rule of the user's that rewrites across a space: "e c" to "z"
        (tmp_path / "rules.tsv").write_text("65 20 63\t7A\n")
        trainer = {"normalization_rule_tsv": str(tmp_path / "rules.tsv")}
    spm.SentencePieceTrainer.train(input=str(tmp_path / "corpus.txt"), model_prefix=str(tmp_path / "m"),
                                   vocab_size=100, hard_vocab_limit=False, minloglevel=2, **trainer)
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "m.model"))
    write_jsonl(tmp_path / "long.jsonl", texts)
    by_line = line_texts(tmp_path / "long.jsonl")
    for shape, keys in [([1], {"pad_id": -1}), ([33], {"add_bos": True, "pad_id": -1}),
                        ([300], {"add_eos": True, "pad_id": -1}), ([None], {"max_length": 90})]:
        field = spm_field(tmp_path / "m.model", dtype="int64", shape=shape, **keys)
        config = {"source": {"kind": "jsonl", "files": str(tmp_path / "long.jsonl"), "fields": [field]},
                  "batch_size": 8, "decode": {"threads": 2}}
        if shape[0] is None:
            config["collate"] = {"pad_values": {"ids": -1}}
        length = shape[0] or keys["max_length"]
        rows = 0
        with ferry.Pipeline(config) as pipeline:
            for batch in pipeline:
                lengths = batch["ids_lengths"].tolist() if shape[0] is None else [length] * len(batch.sample_keys)
                for row, kept, key in zip(batch["ids"].cpu().tolist(), lengths, batch.sample_keys):
                    text = by_line[int(key.rsplit(":", 1)[1])]
                    want = expected_ids(sp, text, length, keys.get("add_bos", False), keys.get("add_eos", False),
                                        pad=-1 if shape[0] else None)
                    assert row[:kept] == want and all(i == -1 for i in row[kept:]), (trainer, shape, key)
                    rows += 1
        assert rows == len(texts)


def test_tar_text_members_of_any_length_are_cut_to_max_length(tmp_path, model):
    path, sp = model
    texts = random_texts(150, 7)
    with tarfile.open(tmp_path / "shard-0.tar", "w") as tar:
        for i, text in enumerate(texts):
            data = text.encode()
            info = tarfile.TarInfo(f"{i:06d}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    member = {"name": "ids", "extension": "txt", "dtype": "int64", "shape": [None], "max_length": 24,
              "decoder": "sentencepiece", "model": str(path), "add_eos": True}
    config = {"source": {"kind": "tar", "shards": str(tmp_path / "shard-0.tar"), "members": [member]},
              "batch_size": 10, "collate": {"pad_values": {"ids": -1}}}
    rows = 0
    with ferry.Pipeline(config) as pipeline:
        for batch in pipeline:
            for ids, length, index in zip(batch["ids"].cpu(), batch["ids_lengths"].cpu(), batch.sample_indices):
                expected = expected_ids(sp, texts[index], 24, False, True)
                assert ids[:length].tolist() == expected and (ids[length:] == -1).all()
                rows += 1
    assert rows == len(texts)


def test_jsonl_members_feed_several_fields_through_their_decoders(tmp_path, model):
    path, sp = model
    texts = random_texts(40, 3)
    write_jsonl(tmp_path / "a.jsonl", texts[:25])
    write_jsonl(tmp_path / "b.jsonl", texts[25:])
    fields = [spm_field(path, dtype="int64", shape=[32]),
              {"name": "id", "dtype": "int64", "shape": [], "decoder": "json"},
              {"name": "scores", "dtype": "float32", "shape": [2], "decoder": "json"},
              {"name": "raw", "key": "text", "max_length": 4096}]
    config = {"source": {"kind": "jsonl", "files": [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")],
                         "fields": fields}, "batch_size": 8}
    with ferry.Pipeline(config) as pipeline:
        for batch in pipeline:
            for row in range(len(batch.sample_keys)):
                base = 0 if batch.sample_keys[row].startswith(str(tmp_path / "a.jsonl")) else 25
                i = base + int(batch["id"][row])
                assert batch["ids"][row].tolist() == expected_ids(sp, texts[i], 32, False, False, pad=0)
                assert batch["scores"][row].tolist() == [i - base, -(i - base)]
                raw = bytes(batch["raw"][row][:batch["raw_lengths"][row]].tolist()).decode()
                assert raw == texts[i]


def test_bad_text_inputs_are_errors_that_say_where(tmp_path, model):
    path, _ = model
    write_jsonl(tmp_path / "t.jsonl", ["one", "two"])
    (tmp_path / "not.model").write_bytes(b"this is not a sentencepiece model")

    def config(field, files=None):
        return {"source": {"kind": "jsonl", "files": str(files or tmp_path / "t.jsonl"), "fields": [field]},
                "batch_size": 1}

    with pytest.raises(ferry.ConfigError, match=r"model.*no such file"):
        ferry.Pipeline(config(spm_field(tmp_path / "missing.model", dtype="int64", shape=[8])))
    with pytest.raises(ferry.ConfigError, match=r"not a sentencepiece model"):
        ferry.Pipeline(config(spm_field(tmp_path / "not.model", dtype="int64", shape=[8])))
    with pytest.raises(ferry.ConfigError, match=r"int32 or int64 ids"):
        ferry.Pipeline(config(spm_field(path, shape=[8])))
    with pytest.raises(ferry.ConfigError, match=r"no room for the BOS and EOS"):
        ferry.Pipeline(config(spm_field(path, dtype="int64", shape=[1], add_bos=True, add_eos=True)))
    with pytest.raises(ferry.ConfigError, match=r"no EOS piece"):
        no_eos = tmp_path / "no_eos"
        spm.SentencePieceTrainer.train(input=str(path.parent / "corpus.txt"), model_prefix=str(no_eos),
                                       vocab_size=64, eos_id=-1, minloglevel=2)
        ferry.Pipeline(config(spm_field(f"{no_eos}.model", dtype="int64", shape=[8], add_eos=True)))
    with pytest.raises(ferry.ConfigError, match=r"no such JSON-lines file"):
        ferry.Pipeline(config(spm_field(path, dtype="int64", shape=[8]), files=tmp_path / "none.jsonl"))

    # A line that is no object, one without the member: errors naming the file and line, or skipped.
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n[1, 2]\n{"other": 1}\n{"text": "also fine"}\n')
    bad = config(spm_field(path, dtype="int64", shape=[8]), files=tmp_path / "bad.jsonl")
    with ferry.Pipeline(bad) as pipeline:
        batches = iter(pipeline)
        next(batches)
        with pytest.raises(ferry.Error, match=r"bad.jsonl:2: a line must be a JSON object"):
            next(batches)
    with ferry.Pipeline(bad, overrides={"decode.on_error": "skip"}) as pipeline:
        assert len(list(pipeline)) == 2
        skipped = pipeline.stats()["skipped"]
        assert skipped["count"] == 2
        assert any("no member 'text'" in entry["reason"] for entry in skipped["listed"])


def test_raw_fields_are_cut_and_padded_where_asked(tmp_path):
    texts = random_texts(60, 11)
    write_jsonl(tmp_path / "t.jsonl", texts)
    lines = line_texts(tmp_path / "t.jsonl")
    fields = [{"name": "fixed", "key": "text", "shape": [12], "truncate": True, "pad_value": 32},
              {"name": "cut", "key": "text", "shape": [None], "max_length": 10, "truncate": True}]
    config = {"source": {"kind": "jsonl", "files": str(tmp_path / "t.jsonl"), "fields": fields}, "batch_size": 7}
    rows = 0
    with ferry.Pipeline(config) as pipeline:
        for batch in pipeline:
            for row, key in enumerate(batch.sample_keys):
                text = lines[int(key.rsplit(":", 1)[1])].encode()
                assert bytes(batch["fixed"][row].tolist()) == text[:12].ljust(12, b" ")
                length = int(batch["cut_lengths"][row])
                assert bytes(batch["cut"][row][:length].tolist()) == text[:10]
                rows += 1
    assert rows == len(texts)
    # Without them a sample of another length is an error that says what would take it.
    fields = [{"name": "fixed", "key": "text", "shape": [12]}]
    config["source"]["fields"] = fields
    with ferry.Pipeline(config) as pipeline, pytest.raises(ferry.Error, match="pad_value fills up shorter ones"):
        list(pipeline)
    fields[0]["pad_value"] = 0
    with pytest.raises(ferry.ConfigError, match="pad_value fills a fixed length"):
        ferry.Pipeline(dict(config, source=dict(config["source"], fields=[dict(fields[0], shape=[None], max_length=8)])))


def test_ferry_run_delivers_the_same_ids(tmp_path, model, cli):
    # The command loads the module too, beside its own malloc (jemalloc where it was linked to it).
    path, _ = model
    write_jsonl(tmp_path / "t.jsonl", random_texts(100, 5))
    field = spm_field(path, dtype="int64", shape=[40], add_bos=True, add_eos=True, pad_id=-100)
    config = {"source": {"kind": "jsonl", "files": str(tmp_path / "t.jsonl"), "fields": [field]}, "batch_size": 10,
              "sampler": {"shuffle": True, "seed": 3}, "decode": {"threads": 2}}
    (tmp_path / "run.yaml").write_text(json.dumps(config))
    with ferry.Pipeline(config) as pipeline:
        expected = [bytes_digest(batch) for batch in pipeline]
    assert ferry_run_digests(cli, str(tmp_path / "run.yaml"), [], len(expected), tmp_path) == expected

"""`ferry run` over remote and compressed data: the digest of every batch equals the local run's, for tar
shards (plain and compressed) and a Megatron dataset, over HTTP (nginx) and S3 (OpenStack Swift's S3 API,
which checks SigV4 signatures), both started here on 127.0.0.1 (tests/servers/). Also the report's
`remote` object and a resumed run that fetches only what it still reads."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import env_path

SERVERS = Path(env_path("FERRY_SOURCE_DIR")) / "tests" / "servers"
sys.path.insert(0, str(SERVERS))
import http_server  # noqa: E402  (tests/servers/)

ACCESS_KEY, SECRET_KEY = "ferry", "ferry-secret"
SHARDS = "shard-{000000..000003}"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The tar dataset (plain, .tar.gz, .tar.zst) and the tokens dataset, over HTTP and from S3."""
    root = tmp_path_factory.mktemp("served")
    tar = Path(env_path("FERRY_DATASET_TAR"))
    tokens = Path(env_path("FERRY_DATASET_TOKENS"))
    for n in range(4):
        name = f"shard-{n:06d}.tar"
        shutil.copy(tar / name, root / name)
        subprocess.run(["gzip", "-k", str(root / name)], check=True)
        subprocess.run(["zstd", "-q", str(root / name), "-o", str(root / (name + ".zst"))], check=True)
    for suffix in (".idx", ".bin"):
        shutil.copy(str(tokens) + suffix, root / ("tokens" + suffix))

    s3_dir = tmp_path_factory.mktemp("s3")
    s3 = subprocess.Popen(["/usr/bin/python3", str(SERVERS / "s3_server.py"), "--dir", str(s3_dir)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    endpoint_file = s3_dir / "endpoint"
    deadline = time.time() + 60
    while not endpoint_file.exists():
        assert s3.poll() is None and time.time() < deadline, "the S3 server did not start: " + s3.stderr.read()
        time.sleep(0.05)
    endpoint = endpoint_file.read_text().split()[-1]

    def s3_curl(*args):
        subprocess.run(["curl", "-sS", "--fail-with-body", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                        f"{ACCESS_KEY}:{SECRET_KEY}", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", *args],
                       check=True, capture_output=True)

    s3_curl("-X", "PUT", f"{endpoint}/data")
    for path in sorted(root.iterdir()):
        s3_curl("-T", str(path), f"{endpoint}/data/train/{path.name}")
    with http_server.serve(str(root), str(tmp_path_factory.mktemp("http"))) as http:
        yield {"http": http.http, "s3": endpoint, "local": root}
    s3.terminate()
    s3.wait(timeout=30)


def run(cli, config, overrides, tmp_path, extra=(), env=None):
    """`ferry run` with a digest (and a report); the digest lines' `bytes` parts, and the report."""
    digest, report = tmp_path / "digest.txt", tmp_path / "report.json"
    command = [cli, "run", config, "--digest", str(digest), "--report", str(report), "--set", "stats.progress=off",
               "--set", "transfer.device=cpu", *extra]
    for item in overrides:
        command += ["--set", item]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line.split(" bytes ")[1].strip() for line in digest.read_text().splitlines()]
    return lines, json.loads(report.read_text()), result.stdout + result.stderr


def s3_env(served):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               AWS_ENDPOINT_URL=served["s3"], AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
               AWS_CONFIG_FILE="/nonexistent")
    return env


TAR = str(Path(env_path("FERRY_SOURCE_DIR")) / "configs" / "tar.yaml")
MEGATRON = str(Path(env_path("FERRY_SOURCE_DIR")) / "configs" / "megatron.yaml")
TAR_SETTINGS = ["batch_size=16", "decode.threads=2", "sampler.epochs=2"]
MEGATRON_SETTINGS = ["batch_size=4", "source.seq_len=256", "decode.threads=2", "sampler.shuffle=true", "sampler.epochs=2"]


@pytest.mark.parametrize("route", ["http", "http-gzip", "http-zstd", "s3", "s3-gzip", "pipe"])
def test_tar_digests_match_the_local_run(cli, served, tmp_path, route):
    local, _, _ = run(cli, TAR, TAR_SETTINGS + [f"source.shards={served['local']}/{SHARDS}.tar"], tmp_path)
    kind, _, compression = route.partition("-")
    suffix = ".tar" + {"gzip": ".gz", "zstd": ".zst", "": ""}[compression]
    base = {"http": served["http"], "s3": "s3://data/train", "pipe": f"pipe:cat {served['local']}"}[kind]
    remote, report, _ = run(cli, TAR,
                            TAR_SETTINGS + [f"source.shards={base}/{SHARDS}{suffix}",
                                            f"remote.cache_dir={tmp_path / 'cache'}"],
                            tmp_path, env=s3_env(served))
    assert remote == local
    fetched = report["remote"]
    assert fetched["fetches"] >= 4 and fetched["cache_dir"] == str(tmp_path / "cache")
    if kind != "pipe":
        assert fetched["network_bytes"] > 0 and fetched["requests"] >= 4


@pytest.mark.parametrize("route", ["http", "s3"])
def test_megatron_digests_match_the_local_run(cli, served, tmp_path, route):
    local, _, _ = run(cli, MEGATRON, MEGATRON_SETTINGS + [f"source.prefix={served['local']}/tokens"], tmp_path)
    prefix = {"http": served["http"] + "/tokens", "s3": "s3://data/train/tokens"}[route]
    remote, report, _ = run(cli, MEGATRON,
                            MEGATRON_SETTINGS + [f"source.prefix={prefix}", f"remote.cache_dir={tmp_path / 'cache'}",
                                                 "remote.block_size=64KiB"],
                            tmp_path, env=s3_env(served))
    assert remote == local
    assert report["remote"]["fetches"] > 1  # the .idx, and the .bin in blocks


def test_a_resumed_run_fetches_only_what_it_still_reads(cli, served, tmp_path):
    """Stopped after a few batches, then resumed: the resumed run fetches no shard it had finished."""
    settings = ["batch_size=8", "decode.threads=1", "sampler.shuffle_buffer=2", f"remote.cache_dir={tmp_path / 'cache'}",
                f"source.shards={served['http']}/{SHARDS}.tar"]
    (tmp_path / "whole").mkdir()
    whole, _, _ = run(cli, TAR, settings, tmp_path / "whole")
    state = tmp_path / "state.json"
    first, _, _ = run(cli, TAR, settings, tmp_path, extra=["--batches", "5", "--save-state", str(state)])
    shutil.rmtree(tmp_path / "cache" / "data")  # what it fetched is gone; its indexes are kept
    (tmp_path / "cache" / "data").mkdir()
    rest, report, _ = run(cli, TAR, settings, tmp_path, extra=["--resume", str(state)])
    assert first + rest == whole
    # 5 batches of 8 are 40 samples: into the third of four 16-sample shards (in their shuffled order, a
    # 2-sample buffer between). Only it and the fourth are fetched.
    assert report["remote"]["fetches"] == 2

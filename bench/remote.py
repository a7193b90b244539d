#!/usr/bin/env python3
"""bench/remote.py: tar shards read over HTTP from nginx on a slow link, beside the same shards read from the
local disk, in one run.

    python3 bench/remote.py --ferry build/release/cli/ferry --out results/remote [--quick]

The dataset: `ferry make-dataset tar` shards (JPEG + label), read as raw bytes (no decoding: the rows measure
moving the data, not decoding it), batches of 64, decode.threads --threads, on the CPU.

The link: nginx (tests/servers/http_server.py) in a network namespace behind a veth pair with `tc netem`
adding the round-trip time (half each way) and a rate limit, where the kernel has netem. Elsewhere (no
sch_netem), a user-space proxy on 127.0.0.1 delays each chunk by half the round-trip time each way and
paces it to the rate: the same latency and bandwidth, as seen by one TCP connection. The JSON says which.

Rows:
  local        the shards on the local disk (the baseline)
  rtt R, B     over the link with round-trip time R and bandwidth B, the default remote.prefetch, indexes
               kept from an earlier run (as every run after the first): samples/s, its ratio to the local
               rate (goal at 20 ms: >= 90%), time to the first batch (goal: < 2 s)
  first run    the same, without kept indexes: indexing fetches every shard first
  cache 100% / 50%  two epochs of the shards in order, a cache of the whole dataset or of half of it: bytes
               fetched over the dataset's bytes (goal: 1.00 for 100%), fetches beside the fewest any cache of
               that size could make for that order (Belady's rule; goal: within 5%; the shuffled orders are
               checked against Belady in tests/io/remote/remote_source_test.cpp)

Prints the table, writes OUT/remote.json and, with matplotlib, OUT/remote.png. Needs root (namespaces) only
for netem; the proxy needs nothing.
"""

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "servers"))
import http_server  # noqa: E402


def log(message):
    print(message, file=sys.stderr, flush=True)


def make_shards(ferry, folder, shards, samples):
    if (folder / "shard-000000.tar").exists():
        return
    subprocess.run([ferry, "make-dataset", "tar", str(folder), "--shards", str(shards), "--samples", str(samples)],
                   check=True, capture_output=True)


class DelayProxy:
    """A TCP proxy on 127.0.0.1 before `upstream` that delays every chunk by half the round-trip time each
    way and paces each direction to `rate` bits per second."""

    def __init__(self, upstream_port, rtt_s, rate_bps):
        self.upstream_port, self.delay, self.rate = upstream_port, rtt_s / 2, rate_bps / 8
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _pipe(self, reader, writer):
        queue = asyncio.Queue()
        sent_until = [time.monotonic()]

        async def deliver():
            while True:
                due, data = await queue.get()
                if data is None:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            writer.close()

        task = asyncio.ensure_future(deliver())
        try:
            while True:
                data = await reader.read(256 * 1024)
                if not data:
                    break
                # Paced to the rate, then delayed: when its last bit leaves the link, plus the latency.
                start = max(time.monotonic(), sent_until[0])
                sent_until[0] = start + len(data) / self.rate
                await queue.put((sent_until[0] + self.delay, data))
        except ConnectionError:
            pass
        await queue.put((0, None))
        await task

    async def _client(self, reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)


def netem_available():
    if os.geteuid() != 0 or shutil.which("tc") is None:
        return False
    probe = subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "0ms"], capture_output=True)
    if probe.returncode == 0:
        subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True)
        return True
    return False


class NetemLink:
    """nginx in a network namespace behind a veth pair, netem on both ends."""

    def __init__(self, root, state, rtt_s, rate_bps):
        self.ns = f"ferrybench{os.getpid()}"
        sh = lambda *a: subprocess.run(list(a), check=True, capture_output=True)  # noqa: E731
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", "fbh0", "type", "veth", "peer", "name", "fbn0")
        sh("ip", "link", "set", "fbn0", "netns", self.ns)
        sh("ip", "addr", "add", "10.233.0.1/24", "dev", "fbh0")
        sh("ip", "link", "set", "fbh0", "up")
        ns = ["ip", "netns", "exec", self.ns]
        sh(*ns, "ip", "addr", "add", "10.233.0.2/24", "dev", "fbn0")
        sh(*ns, "ip", "link", "set", "fbn0", "up")
        sh(*ns, "ip", "link", "set", "lo", "up")
        netem = ["netem", "delay", f"{rtt_s * 500:.3f}ms", "rate", f"{int(rate_bps)}bit", "limit", "100000"]
        sh("tc", "qdisc", "add", "dev", "fbh0", "root", *netem)
        sh(*ns, "tc", "qdisc", "add", "dev", "fbn0", "root", *netem)
        self.proc = subprocess.Popen([*ns, sys.executable, str(HERE.parent / "tests/servers/http_server.py"), "--root",
                                      str(root), "--state", str(state)], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        self.url = line[1].replace("127.0.0.1", "10.233.0.2")

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        subprocess.run(["ip", "link", "del", "fbh0"], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


CONFIG = """source:
  kind: tar
  shards: SHARDS
batch_size: 64
pool: {slab_size: 64MiB}      # raw JPEG bytes of any length: the largest batch is not known ahead
transfer: {device: cpu}
stats: {progress: off}
sampler: {epochs: EPOCHS}
"""


def ferry_run(ferry, shards, settings, work, epochs=1):
    report, config = work / "report.json", work / "remote.yaml"
    config.write_text(CONFIG.replace("SHARDS", shards).replace("EPOCHS", str(epochs)))
    command = [ferry, "run", str(config), "--report", str(report)]
    for item in settings:
        command += ["--set", item]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(report.read_text())


def fewest_fetches(order, slots):
    held, fetches = set(), 0
    for i, shard in enumerate(order):
        if shard in held:
            continue
        fetches += 1
        if len(held) >= slots:
            def next_use(s):
                for j in range(i + 1, len(order)):
                    if order[j] == s:
                        return j
                return len(order)
            held.discard(max(held, key=next_use))
        held.add(shard)
    return fetches


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ferry", required=True)
    parser.add_argument("--out", default="results/remote")
    parser.add_argument("--data", default=None, help="where the shards are made (default: a temporary folder)")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="small sizes for a CPU machine")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ferry-remote-bench-"))
    data = Path(args.data) if args.data else work / "shards"
    shards, samples = (8, 800) if args.quick else (32, 16000)
    make_shards(args.ferry, data, shards, samples)
    pattern = "shard-{000000..%06d}.tar" % (shards - 1)
    dataset_bytes = sum(f.stat().st_size for f in data.glob("shard-*.tar"))
    threads = min(args.threads, 2) if args.quick else args.threads
    base = [f"decode.threads={threads}"]
    netem = netem_available()
    links = [(0.0, 10e9), (0.020, 10e9), (0.020, 1e9), (0.100, 10e9)] if not args.quick else [(0.0, 10e9), (0.020, 1e9)]
    rows = []

    local = ferry_run(args.ferry, f"{data}/{pattern}", base, work)
    local_rate = local["totals"]["samples_per_second_after_first_batch"]
    rows.append({"row": "local", "samples_per_second": local_rate, "ratio": 1.0,
                 "first_batch_seconds": local["totals"]["first_batch_seconds"]})
    log(f"local: {local_rate:.0f} samples/s")

    with http_server.serve(str(data), str(work / "http")) as http:
        for rtt, rate in links:
            link = NetemLink(data, work / f"netns-{rtt}-{rate}", rtt, rate) if netem else None
            proxy = None if netem else DelayProxy(int(http.http.rsplit(":", 1)[1]), rtt, rate)
            url = link.url if link else f"http://127.0.0.1:{proxy.port}"
            name = f"rtt {rtt * 1000:.0f} ms, {rate / 1e9:.0f} Gbit/s"
            cache = work / f"cache-{rtt}-{rate}"
            try:
                first = ferry_run(args.ferry, f"{url}/{pattern}", base + [f"remote.cache_dir={cache}"], work)
                shutil.rmtree(cache / "data")  # the shards go, their indexes stay: a later run's start
                kept = ferry_run(args.ferry, f"{url}/{pattern}", base + [f"remote.cache_dir={cache}"], work)
            finally:
                if link:
                    link.close()
            rate_kept = kept["totals"]["samples_per_second_after_first_batch"]
            rows.append({"row": name, "samples_per_second": rate_kept, "ratio": rate_kept / local_rate,
                         "first_batch_seconds": kept["totals"]["first_batch_seconds"],
                         "first_run_first_batch_seconds": first["totals"]["first_batch_seconds"],
                         "fetch_wait_share": kept["remote"]["wait_share"]})
            log(f"{name}: {rate_kept:.0f} samples/s ({rate_kept / local_rate:.2f} of local), first batch "
                f"{kept['totals']['first_batch_seconds']:.2f} s (first run {first['totals']['first_batch_seconds']:.2f} s)")

        # Two epochs in order (the same cycle of shards twice), a cache of the whole dataset and of half of it.
        largest = max(f.stat().st_size for f in data.glob("shard-*.tar"))
        for share in (1.0, 0.5):
            cache = work / f"cache-share-{share}"
            indexed = work / f"cache-share-{share}-index"
            ferry_run(args.ferry, f"{http.http}/{pattern}", base + [f"remote.cache_dir={indexed}"], work)
            cache.mkdir()
            shutil.copytree(indexed / "index", cache / "index")
            budget = max(int(dataset_bytes * share) + 4096, 2 * threads * largest)
            report = ferry_run(args.ferry, f"{http.http}/{pattern}",
                               base + [f"remote.cache_dir={cache}", f"remote.max_bytes={budget}"], work, epochs=2)
            fetched = report["remote"]["network_bytes"]
            slots = max(1, budget // largest)
            fewest = shards if budget >= dataset_bytes else fewest_fetches(list(range(shards)) * 2, min(slots, shards))
            rows.append({"row": f"cache {share:.0%}, 2 epochs", "bytes_fetched_over_dataset": fetched / dataset_bytes,
                         "fetches": report["remote"]["fetches"], "fewest_fetches": fewest,
                         "cache_bytes": budget})
            log(f"cache {share:.0%}: fetched {fetched / dataset_bytes:.2f} x the dataset, "
                f"{report['remote']['fetches']} fetches (bound {fewest})")

    result = {"benchmark": "remote", "link": "netem" if netem else "user-space delay proxy (no sch_netem here)",
              "host": platform.node(), "threads": threads, "shards": shards, "samples": samples,
              "dataset_bytes": dataset_bytes, "rows": rows}
    (out / "remote.json").write_text(json.dumps(result, indent=2))
    print(f"\nremote data ({result['link']}), {shards} shards, {dataset_bytes / 1e6:.0f} MB, {threads} threads")
    print(f"{'row':<28} {'samples/s':>10} {'of local':>9} {'1st batch':>10}")
    for row in rows:
        if "samples_per_second" in row:
            print(f"{row['row']:<28} {row['samples_per_second']:>10.0f} {row['ratio']:>9.2f} "
                  f"{row['first_batch_seconds']:>9.2f}s")
        else:
            print(f"{row['row']:<28} fetched {row['bytes_fetched_over_dataset']:.2f} x the dataset, "
                  f"{row['fetches']} fetches (fewest possible: {row['fewest_fetches']})")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    timed = [row for row in rows if "samples_per_second" in row]
    figure, axis = plt.subplots(figsize=(8, 4))
    axis.barh([row["row"] for row in timed], [row["ratio"] for row in timed])
    axis.axvline(0.9, color="gray", linestyle="--", label="goal at 20 ms: 90% of local")
    axis.set_xlabel("samples/s over the local rate")
    axis.legend()
    figure.tight_layout()
    figure.savefig(out / "remote.png", dpi=120)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench/remote.py: tar shards read over HTTP from nginx on a slow link, beside the same shards read from the
local disk, in one run.

    python3 bench/remote.py --ferry build/release/cli/ferry --out results/remote [--quick]

The dataset: `ferry make-dataset tar` shards (JPEG + label), decoded as a training loader does (resized to
256, cropped to 224 x 224), batches of 64, decode.threads --threads, on the CPU. Each row also says how much
of the link's bandwidth it used: a run that fills the link cannot go faster over it.

The link: nginx (tests/servers/http_server.py) in a network namespace behind a veth pair with `tc netem`
adding the round-trip time (half each way) and a rate limit, where the kernel has netem. Elsewhere (no
sch_netem), bench/slow_link, a proxy on 127.0.0.1 that paces each direction to the rate (shared by the
connections) and delays it by half the round-trip time: the same latency and bandwidth, without TCP's slow
start. The JSON says which.

Rows:
  local        the shards on the local disk (the baseline)
  rtt R, B     over the link with round-trip time R and bandwidth B, the default remote.prefetch, indexes
               kept from an earlier run (as every run after the first): samples/s, its ratio to the local
               rate (goal at 20 ms: >= 90%), time to the first batch (goal: < 2 s)
  first run    the same, without kept indexes: indexing fetches every shard first
  cache 100% / 50%  two epochs of the shards in order over the 20 ms link, a cache of the whole dataset or
               of half of it: samples/s against two local epochs, bytes fetched over the dataset's bytes
               (goal: 1.00 for 100%), fetches beside the fewest any cache of that size could make for that
               order (Belady's rule; goal: within 5%; other orders are checked against Belady in
               tests/io/remote/fetch_plan_test.cpp and remote_source_test.cpp)

Prints the table, writes OUT/remote.json and, with matplotlib, OUT/remote.png (--plot JSON prints the table
and draws the plot again, beside that JSON, from an earlier run's). Needs root (namespaces) only for netem;
the proxy needs nothing.
"""

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "servers"))
import http_server  # noqa: E402
from bench_support import pyplot  # noqa: E402  (bench/, beside this script)


def log(message):
    print(message, file=sys.stderr, flush=True)


def make_shards(ferry, folder, shards, samples):
    if (folder / "shard-000000.tar").exists():
        return
    subprocess.run([ferry, "make-dataset", "tar", str(folder), "--shards", str(shards), "--samples", str(samples)],
                   check=True, capture_output=True)


class SlowLink:
    """bench/slow_link (built with the benchmarks) before `upstream_port`: each direction paced to `rate_bps`,
    shared by all connections, and delayed by half the round-trip time `rtt_s`."""

    def __init__(self, program, upstream_port, rtt_s, rate_bps):
        self.proc = subprocess.Popen([program, str(upstream_port), str(rtt_s * 1000), str(int(rate_bps))],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "port":
            self.close()
            raise RuntimeError(f"{program} did not start")
        self.port = int(line[1])

    def close(self):
        self.proc.kill()
        self.proc.wait()


def netem_available():
    """Whether this machine can run NetemLink: root, tc with the kernel's netem, and network namespaces."""
    if os.geteuid() != 0 or shutil.which("tc") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "0ms"], capture_output=True)
    if probe.returncode != 0:
        return False
    subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True)
    name = f"ferryprobe{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        return False
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return True


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
                                      str(root), "--state", str(state), "--listen", "0.0.0.0"],
                                     stdout=subprocess.PIPE, text=True)
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
  members:
    - {name: image, extension: jpg, decoder: jpeg, shape: [224, 224, 3], resize_shorter: 256, crop: random}
    - {name: label, extension: cls, decoder: label, dtype: int64, shape: []}
batch_size: 64
transfer: {device: cpu}
stats: {progress: off}
sampler: {epochs: EPOCHS}
"""


def ferry_run(ferry, shards, settings, work, epochs=1):
    report_path, config = work / "report.json", work / "remote.yaml"
    config.write_text(CONFIG.replace("SHARDS", shards).replace("EPOCHS", str(epochs)))
    command = [ferry, "run", str(config), "--report", str(report_path)]
    for item in settings:
        command += ["--set", item]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(report_path.read_text())


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
    parser.add_argument("--ferry")
    parser.add_argument("--out", default="results/remote")
    parser.add_argument("--data", default=None, help="where the shards are made (default: a temporary folder)")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--slow-link", default=None,
                        help="the slow_link program (default: bench/slow_link beside the ferry program's build)")
    parser.add_argument("--quick", action="store_true", help="small sizes for a CPU machine")
    parser.add_argument("--plot", metavar="JSON",
                        help="only print the table and draw the plot of an earlier run's remote.json, beside it")
    args = parser.parse_args()
    if args.plot:
        report(json.loads(Path(args.plot).read_text()), Path(args.plot).with_suffix(".png"))
        return
    if not args.ferry:
        parser.error("--ferry is needed (or --plot JSON)")
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
    slow_link = args.slow_link or str(Path(args.ferry).resolve().parent.parent / "bench" / "slow_link")
    if not netem and not os.access(slow_link, os.X_OK):
        raise SystemExit(f"no netem here, and no slow_link program at {slow_link}: build the benchmarks, or pass "
                         "--slow-link")
    links = [(rtt, rate) for rtt in (0.0, 0.020, 0.100) for rate in (10e9, 1e9)]
    if args.quick:
        links = [(0.0, 10e9), (0.020, 1e9)]
    rows = []

    local = ferry_run(args.ferry, f"{data}/{pattern}", base, work)
    local_rate = local["totals"]["samples_per_second_after_first_batch"]
    rows.append({"row": "local", "samples_per_second": local_rate, "ratio": 1.0,
                 "first_batch_seconds": local["totals"]["first_batch_seconds"]})
    log(f"local: {local_rate:.0f} samples/s")

    @contextlib.contextmanager
    def link_to(http, rtt, rate):
        """The shards' URL prefix over a link of round-trip time `rtt` and `rate` bits/s."""
        if netem:
            link = NetemLink(data, work / f"netns-{rtt}-{rate}", rtt, rate)
            try:
                yield link.url
            finally:
                link.close()
        else:
            link = SlowLink(slow_link, int(http.http.rsplit(":", 1)[1]), rtt, rate)
            try:
                yield f"http://127.0.0.1:{link.port}"
            finally:
                link.close()

    with http_server.serve(str(data), str(work / "http")) as http:
        for rtt, rate in links:
            name = f"rtt {rtt * 1000:.0f} ms, {rate / 1e9:.0f} Gbit/s"
            cache = work / f"cache-{rtt}-{rate}"
            with link_to(http, rtt, rate) as url:
                first = ferry_run(args.ferry, f"{url}/{pattern}", base + [f"remote.cache_dir={cache}"], work)
                shutil.rmtree(cache / "data")  # the shards go, their indexes stay: a later run's start
                kept = ferry_run(args.ferry, f"{url}/{pattern}", base + [f"remote.cache_dir={cache}"], work)
            rate_kept = kept["totals"]["samples_per_second_after_first_batch"]
            rows.append({"row": name, "samples_per_second": rate_kept, "ratio": rate_kept / local_rate,
                         "link_share": rate_kept * dataset_bytes / samples / (rate / 8),
                         "first_batch_seconds": kept["totals"]["first_batch_seconds"],
                         "first_run_first_batch_seconds": first["totals"]["first_batch_seconds"],
                         "fetch_wait_share": kept["remote"]["wait_share"]})
            log(f"{name}: {rate_kept:.0f} samples/s ({rate_kept / local_rate:.2f} of local), first batch "
                f"{kept['totals']['first_batch_seconds']:.2f} s (first run {first['totals']['first_batch_seconds']:.2f} s)")

        # Two epochs in order (the same cycle of shards twice) over the 20 ms link, a cache of the whole
        # dataset and of half of it.
        largest = max(f.stat().st_size for f in data.glob("shard-*.tar"))
        two_epochs = ferry_run(args.ferry, f"{data}/{pattern}", base, work, epochs=2)
        local_two = two_epochs["totals"]["samples_per_second_after_first_batch"]
        rtt, rate = (0.020, 10e9) if (0.020, 10e9) in links else links[-1]
        for share in (1.0, 0.5):
            cache = work / f"cache-share-{share}"
            indexed = work / f"cache-share-{share}-index"
            budget = max(int(dataset_bytes * share) + 4096, 2 * threads * largest)
            with link_to(http, rtt, rate) as url:
                # Indexed first (a cache's keys name the URL): the run starts from kept indexes, as later runs do.
                ferry_run(args.ferry, f"{url}/{pattern}", base + [f"remote.cache_dir={indexed}"], work)
                cache.mkdir()
                shutil.copytree(indexed / "index", cache / "index")
                run = ferry_run(args.ferry, f"{url}/{pattern}",
                                   base + [f"remote.cache_dir={cache}", f"remote.max_bytes={budget}"], work, epochs=2)
            fetched = run["remote"]["network_bytes"]
            slots = max(1, budget // largest)
            fewest = shards if budget >= dataset_bytes else fewest_fetches(list(range(shards)) * 2, min(slots, shards))
            speed = run["totals"]["samples_per_second_after_first_batch"]
            rows.append({"row": f"cache {share:.0%}, 2 epochs", "bytes_fetched_over_dataset": fetched / dataset_bytes,
                         "fetches": run["remote"]["fetches"], "fewest_fetches": fewest, "cache_bytes": budget,
                         "link": f"rtt {rtt * 1000:.0f} ms, {rate / 1e9:.0f} Gbit/s", "samples_per_second": speed,
                         "link_share": speed * dataset_bytes / samples / (rate / 8),
                         "ratio": speed / local_two, "first_batch_seconds": run["totals"]["first_batch_seconds"],
                         "fetch_wait_share": run["remote"]["wait_share"]})
            log(f"cache {share:.0%}: fetched {fetched / dataset_bytes:.2f} x the dataset, "
                f"{run['remote']['fetches']} fetches (fewest {fewest}), {speed:.0f} samples/s "
                f"({speed / local_two:.2f} of local)")

    result = {"benchmark": "remote", "link": "netem" if netem else "bench/slow_link (no sch_netem here)",
              "host": platform.node(), "threads": threads, "shards": shards, "samples": samples,
              "dataset_bytes": dataset_bytes, "rows": rows}
    (out / "remote.json").write_text(json.dumps(result, indent=2))
    report(result, out / "remote.png")
    shutil.rmtree(work, ignore_errors=True)


def report(result, png):
    """Prints the table and, with matplotlib, draws the plot into `png`."""
    rows, shards, threads = result["rows"], result["shards"], result["threads"]
    print(f"\nremote data ({result['link']}), {shards} shards, {result['dataset_bytes'] / 1e6:.0f} MB, {threads} threads")
    print(f"{'row':<28} {'samples/s':>10} {'of local':>9} {'1st batch':>10} {'net wait':>9} {'of link':>8}")
    for row in rows:
        wait = f"{row['fetch_wait_share']:>9.1%}" if "fetch_wait_share" in row else f"{'':>9}"
        link = f"{row['link_share']:>8.1%}" if "link_share" in row else ""
        print(f"{row['row']:<28} {row['samples_per_second']:>10.0f} {row['ratio']:>9.2f} "
              f"{row['first_batch_seconds']:>9.2f}s {wait} {link}")
        if "fetches" in row:
            print(f"{'':<28} over {row['link']}: fetched {row['bytes_fetched_over_dataset']:.2f} x the dataset, "
                  f"{row['fetches']} fetches (fewest possible: {row['fewest_fetches']})")
    plt = pyplot()
    if plt is None:
        return
    figure, axis = plt.subplots(figsize=(8, 4))
    full = [row.get("link_share", 0) >= 0.95 for row in rows]
    axis.barh([row["row"] for row in rows], [row["ratio"] for row in rows],
              color=["tab:gray" if f else "tab:blue" for f in full])
    if any(full):
        axis.barh([rows[full.index(True)]["row"]], [0], color="tab:gray", label="the link is full")
    axis.invert_yaxis()
    axis.axvline(0.9, color="gray", linestyle="--", label="goal at 20 ms: 90% of local")
    axis.set_xlabel("samples/s over the local rate, same run")
    axis.set_title(f"ferry over a slow link ({result['link']}), {result['host']}")
    axis.legend()
    figure.tight_layout()
    figure.savefig(png, dpi=120)
    print(f"plot: {png}")

if __name__ == "__main__":
    main()

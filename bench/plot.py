#!/usr/bin/env python3
"""bench/plot.py: the plot of a C++ benchmark's JSON, written beside it as a PNG (transfer.json ->
transfer.png).

    python3 bench/plot.py transfer.json [latency.json jpeg_decode.json json_decode.json ...]

bench/transfer, bench/latency and bench/jpeg_decode write their JSON with --json, bench/json_decode with
--out; any of them, from this machine or another, is drawn as:
  transfer     per case, ferry's GB/s beside libtorch's per-tensor .to(), with the link's limit, pack alone
               and the best plain staging loop (on a GPU) as lines; and ferry's speed-up over .to()
  latency      per case, batches/s of ferry beside the plain loop (a thread and a ring of pinned slabs),
               and ferry's share of the plain loop's rate
  jpeg_decode  images/s against threads of ferry's decoder and of plain tjDecompress2, with T x the
               1-thread baseline (perfect scaling) and nvJPEG's best rate where it was measured; ferry
               over plain at each thread count
  json_decode  documents/s of ferry's json decoder beside simdjson's DOM parser
Needs matplotlib (Debian: python3-matplotlib) and nothing else: no torch, no ferry.
"""
import argparse
import sys

from bench_support import bars, figure, lines, png_beside, ratio_lines, read_json, save, threads_axis


def benchmark_of(result):
    """Which benchmark wrote `result`: its "benchmark" key; latency's and json_decode's JSON from before they
    wrote one are told by their own keys."""
    if "benchmark" in result:
        return result["benchmark"]
    if "ferry_docs_per_second" in result:
        return "json_decode"
    if any("plain_batches_per_s" in case for case in result.get("cases", [])):
        return "latency"
    return None


def plot_transfer(result, path):
    cases = result["cases"]
    drawn, (rates, speedups) = figure(2, f"batches of many tensors to {result['device']} ({result['gpu']}), "
                                      f"{result['hardware_threads']} hardware threads, prefetch {result['prefetch']}, "
                                      f"malloc {result['malloc'].split('-')[0]}", width=6.5)
    if drawn is None:
        return
    names = [case["case"] for case in cases]
    bars(rates, names, {"ferry": [case["ferry_gbps"] for case in cases],
                        "torch .to() per tensor": [case["torch_per_tensor_gbps"] for case in cases]},
         "GB/s delivered", "{:.3g}")
    # The ceilings the cases are read against, measured in the same run.
    if result["link_gbps"] > 0:
        rates.axhline(result["link_gbps"], color="black", linestyle="--", linewidth=1,
                      label=f"the link: pinned cudaMemcpyAsync, {result['link_gbps']:.1f}")
    rates.axhline(result["pack_alone_gbps"], color="gray", linestyle=":", linewidth=1,
                  label=f"pack alone (host memory), {result['pack_alone_gbps']:.1f}")
    staged = [row["gbps"] for row in result["staged_ring"] + result["staged_in_windows"]]
    if staged:
        rates.axhline(max(staged), color="tab:green", linestyle="-.", linewidth=1,
                      label=f"best plain staging loop (case a), {max(staged):.1f}")
    rates.legend(fontsize=7, loc="upper left")
    rates.set_title("ferry beside libtorch's per-tensor copies", fontsize=9)
    bars(speedups, names, {"ferry / torch .to()": [case["speedup"] for case in cases]}, "times faster", "{:.1f}x")
    speedups.axhline(1.0, color="gray", linestyle=":", linewidth=1)
    speedups.set_title("ferry's speed-up over .to() per tensor", fontsize=9)
    save(drawn, path)


def plot_latency(result, path):
    cases = result["cases"]
    drawn, (rates, shares) = figure(2, f"small batches on {result['device']}: {result['batches']} batches, prefetch "
                                    f"{result['prefetch']}, {result['decode_threads']} decode threads")
    if drawn is None:
        return
    names = [case["name"] for case in cases]
    bars(rates, names, {"plain loop (a thread, a ring of pinned slabs)": [c["plain_batches_per_s"] / 1e3
                                                                          for c in cases],
                        "ferry (its whole pipeline)": [c["ferry_batches_per_s"] / 1e3 for c in cases]},
         "k batches/s", "{:.1f}")
    rates.set_title("batches/s", fontsize=9)
    bars(shares, names, {"ferry / plain loop": [100 * c["ferry_batches_per_s"] / c["plain_batches_per_s"]
                                                for c in cases]}, "% of the plain loop's rate", "{:.0f}%")
    shares.set_title("ferry's rate as a share of the plain loop's", fontsize=9)
    save(drawn, path)


def plot_jpeg_decode(result, path):
    points = result["points"]
    drawn, (rates, ratios) = figure(2, f"JPEG decoding alone: {result['images']} images ({result['size']}), "
                                    f"{result['hardware_threads']} hardware threads, "
                                    + (f"median of {result['rounds']} rounds" if result["rounds"] > 1 else "one round"))
    if drawn is None:
        return
    baseline = result["baseline_images_per_second"]
    threads = [p["threads"] for p in points]
    lines(rates, {"ferry JpegDecoder": [(p["threads"], p["ferry_images_per_second"]) for p in points],
                  "plain tjDecompress2": [(p["threads"], p["plain_images_per_second"]) for p in points],
                  "T x plain on 1 thread (the baseline)": [(t, t * baseline) for t in threads]},
          "threads", "images/s",
          styles={"plain tjDecompress2": {"linestyle": "--"},
                  "T x plain on 1 thread (the baseline)": {"color": "gray", "linestyle": ":", "marker": ""}})
    nvjpeg = result.get("nvjpeg", {})
    if nvjpeg.get("measured") and nvjpeg.get("rates"):
        best = max(nvjpeg["rates"], key=lambda rate: rate["images_per_second"])
        rates.axhline(best["images_per_second"], color="tab:red", linestyle="-.", linewidth=1,
                      label=f"nvJPEG hardware decoder ({best['callers']} callers)")
        # lines() fixed the axis to the CPU's rates; the hardware's is often far above them.
        rates.set_ylim(0, max(rates.get_ylim()[1], 1.1 * best["images_per_second"]))
        rates.legend(fontsize=7)
    rates.set_title("images/s, each image at its own size", fontsize=9)
    ratio_lines(ratios, {"ferry / plain": [(p["threads"], p["ferry_images_per_second"] / p["plain_images_per_second"])
                                           for p in points]}, "threads", "ferry's rate over plain's")
    ratios.set_title("ferry's decoder over plain tjDecompress2, same threads", fontsize=9)
    for axis in (rates, ratios):
        threads_axis(axis, threads)
    save(drawn, path)


def plot_json_decode(result, path):
    drawn, (axis,) = figure(1, f"/boxes of {result['documents']} detection targets, one thread", width=6)
    if drawn is None:
        return
    rates = [result["ferry_docs_per_second"], result["simdjson_docs_per_second"]]
    megabytes = [rate * result["mean_bytes"] / 1e6 for rate in rates]
    names = [f"ferry json, select /boxes\n{megabytes[0]:.0f} MB/s", f"simdjson DOM, at_pointer\n{megabytes[1]:.0f} MB/s"]
    bars(axis, names, {"documents/s": [r / 1e3 for r in rates]}, "k documents/s (best of 3 rounds)", "{:.0f}k")
    axis.set_title(f"{result['mean_bytes']:.0f} bytes a document; {result['differing']} gave different tensors",
                   fontsize=9)
    save(drawn, path)


PLOTS = {"transfer": plot_transfer, "latency": plot_latency, "jpeg_decode": plot_jpeg_decode,
         "json_decode": plot_json_decode}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="+", help="a JSON that bench/transfer, latency, jpeg_decode or json_decode wrote")
    args = parser.parse_args()
    for path in args.json:
        result = read_json(path)
        benchmark = benchmark_of(result)
        if benchmark not in PLOTS:
            sys.exit(f"plot.py: {path} is not the JSON of {', '.join(PLOTS)}")
        PLOTS[benchmark](result, png_beside(path))


if __name__ == "__main__":
    main()

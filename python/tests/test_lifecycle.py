"""ferry.Pipeline's life: Ctrl-C in a blocked iteration, and no leak over 1000 pipelines."""

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time

import ferry


def tiny_config(seed):
    return {
        "source": {"kind": "synthetic", "samples": 64, "seed": seed, "fields": [
            {"name": "x", "dtype": "float32", "shape": [8, 8]},
            {"name": "tokens", "dtype": "int32", "length": [1, 20], "range": [0, 9]}]},
        "batch_size": 16,
        "prefetch": 2,
        "decode": {"threads": 1 + seed % 3},
    }


def threads():
    return len(os.listdir("/proc/self/task"))


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_creating_and_closing_1000_pipelines_leaks_nothing():
    def cycle(i):
        # Every way a pipeline ends: closed mid-run, run out, left by `with`, dropped unclosed.
        pipeline = ferry.Pipeline(tiny_config(i))
        if i % 4 == 0:
            next(iter(pipeline))
            pipeline.close()
        elif i % 4 == 1:
            assert len(list(pipeline.batches())) == 4
        elif i % 4 == 2:
            with pipeline:
                next(iter(pipeline))
        del pipeline

    for i in range(100):  # warm-up: allocator pools, oneTBB's workers, torch's caches
        cycle(i)
    gc.collect()
    threads_before, rss_before = threads(), rss_bytes()
    for i in range(100, 1100):
        cycle(i)
    gc.collect()
    grown = rss_bytes() - rss_before
    print(f"1000 pipelines: threads {threads_before} -> {threads()}, resident memory {grown / 2**20:+.1f} MiB")
    assert ferry._C.live_staging_bytes() == 0
    # oneTBB may still add workers up to its pool's size, once; a pipeline leaving one thread behind
    # would add a thousand.
    assert threads() < threads_before + 20, f"threads {threads_before} -> {threads()}"
    # A pipeline holds at least its slabs (2 x 4 KiB here) and its threads' stacks: a leak of any of
    # them, 1000 times, would be far above this.
    assert grown < 24 * 2**20, f"resident memory grew {grown / 2**20:.1f} MiB over 1000 pipelines"


CHILD = textwrap.dedent("""
    import sys, time
    import ferry
    # One batch of 500 000 samples on one thread: about two seconds before it is ready.
    config = {"source": {"kind": "synthetic", "samples": 1000000, "seed": 1,
                         "fields": [{"name": "x", "dtype": "int64", "shape": []}]},
              "batch_size": 500000, "prefetch": 1, "decode": {"threads": 1}}
    pipeline = ferry.Pipeline(config)
    print("waiting", flush=True)
    try:
        next(iter(pipeline))
        print("batch", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    pipeline.close()
    print("closed", flush=True)
""")


def test_ctrl_c_interrupts_a_blocked_iteration():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert child.stdout.readline().strip() == "waiting"
        time.sleep(0.2)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        outcome = child.stdout.readline().strip()
        latency = time.monotonic() - sent
        assert outcome == "interrupted", outcome  # raised in the blocked next(), before the batch was ready
        assert child.stdout.readline().strip() == "closed"
        assert child.wait(timeout=60) == 0
        print(f"KeyboardInterrupt {latency * 1000:.0f} ms after SIGINT")
    finally:
        child.kill()
        child.wait()


def descriptors():
    return len(os.listdir("/proc/self/fd"))


def test_close_racing_next_and_collecting_running_pipelines_1000_times():
    """close() from another thread while consumers are inside next(), and running pipelines dropped
    for the garbage collector (in a reference cycle, so only gc.collect() frees them): every stop is
    quick, every consumer ends, and no thread, descriptor or staging byte is left."""
    import random
    import threading

    rng = random.Random(1126)
    stops = []

    def consume(pipeline, errors):
        try:
            for batch in pipeline.batches():
                assert batch["x"].shape[1:] == (8, 8)
        except ferry.Error as error:  # a loop past its end after close() is fine to report; nothing else
            errors.append(error)

    def cycle(i):
        pipeline = ferry.Pipeline(tiny_config(i), overrides={"sampler.epochs": 3})
        if i % 2 == 0:
            errors = []
            consumers = [threading.Thread(target=consume, args=(pipeline, errors)) for _ in range(1 + i % 3)]
            for consumer in consumers:
                consumer.start()
            time.sleep(rng.random() * 0.01)
            started = time.monotonic()
            pipeline.close()
            for consumer in consumers:
                consumer.join(timeout=10)
                assert not consumer.is_alive(), "a consumer stayed blocked after close()"
            stops.append(time.monotonic() - started)
        else:
            if rng.random() < 0.5:
                next(iter(pipeline))
            holder = {"pipeline": pipeline}
            holder["self"] = holder  # a cycle: freed by the collector, while it still runs
            started = time.monotonic()
            del pipeline, holder
            gc.collect()
            stops.append(time.monotonic() - started)

    for i in range(50):  # warm-up
        cycle(i)
    gc.collect()
    threads_before, descriptors_before = threads(), descriptors()
    stops.clear()
    for i in range(50, 1050):
        cycle(i)
    gc.collect()
    stops.sort()
    print(f"1000 stops: median {stops[len(stops) // 2] * 1000:.1f} ms, slowest {stops[-1] * 1000:.1f} ms; "
          f"threads {threads_before} -> {threads()}, descriptors {descriptors_before} -> {descriptors()}")
    assert ferry._C.live_staging_bytes() == 0
    assert threads() < threads_before + 20
    assert descriptors() == descriptors_before
    assert stops[-1] < 1.0, f"a stop took {stops[-1]:.2f} s"

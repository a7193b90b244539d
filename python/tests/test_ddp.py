"""examples/python/train_ddp.py on 2 processes (FERRY_DDP_RANKS sets another count, e.g. 8 on a node of 8
GPUs): with NCCL, one GPU each, where the machine has that many GPUs, else with the gloo backend on the
CPU (the GPUs hidden). Every rank delivers the same number of
batches; across ranks each sample appears exactly once per epoch apart from the padding; training
converges; a run stopped and resumed in new processes continues exactly, per rank.

The processes get torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) from this test directly: Debian's torch 1.13 torchrun fails under Python 3.11 before it
starts anything (its Std enum), and what ferry reads is the environment either way."""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

SOURCE_DIR = os.environ.get("FERRY_SOURCE_DIR",
                            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXAMPLE = os.path.join(SOURCE_DIR, "examples", "python", "train_ddp.py")
WORLD = int(os.environ.get("FERRY_DDP_RANKS", "2"))
# 2000 a rank and one more, whatever the count of ranks: each rank trains as long (8 batches an epoch), and
# padding evens the ranks out (WORLD - 1 samples repeated).
SAMPLES = 2000 * WORLD + 1
PADDING = -SAMPLES % WORLD

# One GPU for each rank, or none: two ranks on one GPU is not what DDP runs.
ON_GPUS = torch.cuda.is_available() and torch.cuda.device_count() >= WORLD and dist.is_nccl_available()

pytestmark = pytest.mark.skipif(not dist.is_available() or not (ON_GPUS or dist.is_gloo_available()),
                                reason="this torch has no torch.distributed with gloo (nor NCCL and a GPU per rank)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Each launch starts two Python processes that import torch and meet over gloo: seconds on an idle machine,
# a minute or more when every core is busy with other tests (scripts/test-under-load.sh). The limit is for a
# hang, not for speed.
LAUNCH_TIMEOUT = 600


def launch(log, *args):
    """Runs the example as WORLD ranks on this machine; returns each rank's log lines. A port another process
    took between free_port() and rank 0's bind is a clash of the machine, not the example's failure: the
    launch is repeated on another port (once more at most)."""
    for attempt in range(2):
        logs, outputs, clashed = launch_once(log, *args)
        if not clashed:
            return logs, outputs
    raise AssertionError("the rendezvous port was taken twice:\n" + "\n".join(o[-1500:] for o in outputs))


def launch_once(log, *args):
    os.makedirs(log, exist_ok=True)
    port = str(free_port())
    processes = []
    for rank in range(WORLD):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(WORLD),
                   LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(WORLD))
        if not ON_GPUS:
            env["CUDA_VISIBLE_DEVICES"] = ""
        processes.append(subprocess.Popen([sys.executable, EXAMPLE, *args, "--samples", str(SAMPLES), "--log", log],
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        outputs = [p.communicate(timeout=LAUNCH_TIMEOUT)[0] for p in processes]
    finally:
        for p in processes:  # a rank that hangs must not outlive the test
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode != 0 for p in processes) and any("Address already in use" in o for o in outputs):
        return None, outputs, True
    for rank, (process, output) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, f"rank {rank}:\n{output[-3000:]}"
    logs = []
    for rank in range(WORLD):
        with open(os.path.join(log, f"rank-{rank}.jsonl")) as f:
            logs.append([json.loads(line) for line in f])
    return logs, outputs, False


def batches_of(lines):
    return [line for line in lines if "samples" in line]


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory):
    """One uninterrupted run of 3 epochs, for both tests: the first checks it, the second resumes against it."""
    return launch(str(tmp_path_factory.mktemp("whole")), "3")


def test_every_rank_gets_its_share_once_per_epoch_and_training_converges(whole_run):
    logs, outputs = whole_run
    ranks = [batches_of(lines) for lines in logs]
    assert len({len(rank) for rank in ranks}) == 1 and ranks[0], "the ranks delivered different numbers of batches"
    for epoch in range(3):
        counts = {}
        for rank in ranks:
            for batch in rank:
                if batch["epoch"] == epoch:
                    for index in batch["samples"]:
                        counts[index] = counts.get(index, 0) + 1
        assert sorted(counts) == list(range(SAMPLES)), f"epoch {epoch}: samples missing"
        assert sum(counts.values()) == SAMPLES + PADDING, f"epoch {epoch}: not {PADDING} padding samples"
    if ON_GPUS:  # each rank's batches arrive on its own GPU (transfer.device auto: cuda:LOCAL_RANK)
        for rank in range(WORLD):
            assert f"on cuda:{rank} (nccl)" in outputs[rank], outputs[rank][-500:]
    # The example's own all-gather check passed on rank 0, every epoch.
    assert outputs[0].count(f"samples once across {WORLD} ranks ({PADDING} padding)") == 3, outputs[0]
    # Gradients are averaged across the ranks: every model learns, and the loss falls.
    for lines in logs:
        assert lines[-1]["final_accuracy"] > 0.85, lines[-1]
        losses = [batch["loss"] for batch in batches_of(lines)]
        assert sum(losses[-4:]) < sum(losses[:4]), losses


def test_a_run_stopped_and_resumed_in_new_processes_continues_exactly_per_rank(tmp_path, whole_run):
    whole, _ = whole_run
    per_epoch = len(batches_of(whole[0])) // 3  # batches a rank delivers an epoch (8)
    # Inside the first epoch, at its end, inside the second.
    for stop in sorted({max(1, per_epoch // 2), per_epoch, per_epoch + max(1, per_epoch // 2)}):
        parts = str(tmp_path / f"parts-{stop}")
        launch(parts, "3", "--stop-after", str(stop))
        resumed, _ = launch(parts, "3", "--resume")
        for rank in range(WORLD):
            expected = [(b["epoch"], b["index"], b["samples"]) for b in batches_of(whole[rank])]
            got = [(b["epoch"], b["index"], b["samples"]) for b in batches_of(resumed[rank])]
            assert got == expected, f"rank {rank}, stopped after {stop} batches"

#!/usr/bin/env python3
"""examples/python/train.py under data-parallel training: torchrun starts one process per GPU, each runs
its own ferry pipeline, which delivers its rank's share of every epoch on its own GPU (RANK, WORLD_SIZE
and LOCAL_RANK come from torchrun; decode.threads auto takes the rank's share of the machine's cores),
and DistributedDataParallel averages the gradients over NCCL (gloo on a machine without GPUs).

    PYTHONPATH=build/release/python torchrun --nproc-per-node 2 examples/python/train_ddp.py [EPOCHS]
        [--samples N] [--log DIR] [--stop-after N] [--resume]

--log DIR: each rank writes DIR/rank-R.jsonl, a line per batch (epoch, index, sample indices, loss) and a
last line with its final accuracy; at every epoch's end the ranks all-gather their sample indices and
rank 0 checks that each sample was delivered exactly once, apart from the padding that evens the ranks out.
--stop-after N: each rank stops after N batches and saves ferry's state to DIR/state-R.json (and the
model to DIR/model.pt); --resume: each rank continues from there, in new processes.
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

import ferry


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("epochs", nargs="?", type=int, default=3)
    parser.add_argument("--samples", type=int, default=32768)
    parser.add_argument("--log", help="a folder for each rank's batch log and state")
    parser.add_argument("--stop-after", type=int, default=0, help="stop after this many batches, saving the state")
    parser.add_argument("--resume", action="store_true", help="continue from --log's saved state")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available() and local_rank >= torch.cuda.device_count():
        sys.exit(f"local rank {local_rank} has no GPU of its own: this machine has {torch.cuda.device_count()}; "
                 "start at most that many processes a machine (torchrun --nproc-per-node), or hide the GPUs "
                 "(CUDA_VISIBLE_DEVICES=) to train on the CPU")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)

    config = {
        "source": {"kind": "synthetic", "samples": args.samples, "seed": 1,
                   "fields": [{"name": "features", "dtype": "float32", "shape": [64]}]},
        "batch_size": 256,
        "sampler": {"shuffle": True, "seed": 7, "epochs": args.epochs, "remainder": "pad"},
        "transfer": {"device": "auto"},  # under torchrun: cuda:LOCAL_RANK where there is a GPU
    }
    state = os.path.join(args.log, f"state-{rank}.json") if args.log else None
    model_path = os.path.join(args.log, "model.pt") if args.log else None
    log = open(os.path.join(args.log, f"rank-{rank}.jsonl"), "a") if args.log else None

    saved = None
    if args.resume:
        with open(state) as f:
            saved = json.load(f)
    with ferry.Pipeline(config, state=saved) as batches:
        torch.manual_seed(0)  # the same start on every run (DDP gives every rank rank 0's weights)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2))
        if args.resume and model_path:
            model.load_state_dict(torch.load(model_path, map_location="cpu"))  # rank 0 saved it from its GPU
        model = model.to(batches.device)
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[batches.device.index] if batches.device.type == "cuda" else None)
        optimizer = torch.optim.Adam(ddp.parameters(), lr=1e-3)
        taken = 0
        first = batches.epoch
        for epoch in range(first, batches.epochs):
            seen = []
            right = total = 0  # the epoch's accuracy, batch by batch as the model learns
            for batch in batches:
                x = batch["features"]
                y = (x[:, :32].sum(1) > x[:, 32:].sum(1)).long()
                logits = ddp(x)
                loss = torch.nn.functional.cross_entropy(logits, y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                right += int((logits.argmax(1) == y).sum())
                total += len(y)
                seen += batch.sample_indices
                taken += 1
                if log:
                    log.write(json.dumps({"epoch": batch.epoch, "index": batch.index,
                                          "samples": batch.sample_indices, "loss": loss.item()}) + "\n")
                if args.stop_after and taken == args.stop_after:
                    break
            if args.stop_after and taken == args.stop_after:
                break
            if not (args.resume and epoch == first):  # a resumed epoch's first part came before
                check_epoch(epoch, seen, rank, world, args.samples, batches.device)
        accuracy = right / max(total, 1)  # over the last epoch: a last batch of a few samples says little
        if args.stop_after and state:
            with open(state, "w") as f:
                json.dump(batches.state_dict(), f)
            if rank == 0:
                torch.save(model.state_dict(), model_path)
        if log:
            log.write(json.dumps({"final_accuracy": accuracy, "batches": taken}) + "\n")
            log.close()
        print(f"rank {rank} of {world}: {taken} batches, final accuracy {accuracy:.3f} on {batches.device} "
              f"({backend}); {batches.stats()['bottleneck']}")
    dist.destroy_process_group()


# Tensors handed to a collective stay referenced here for the process's life: with gloo, torch 1.13 hangs
# at shutdown when a worker thread drops the last reference to a Python-owned tensor (it waits for the GIL)
# while the main thread, holding the GIL, tears the process group down and waits for that worker.
_HANDED_TO_COLLECTIVES = []


def check_epoch(epoch, seen, rank, world, samples, device):
    """All ranks' sample indices of one epoch: every sample exactly once, plus the padding that gives
    every rank the same number (samples repeated from the epoch's start, fewer than `world`). The indices
    travel on `device`, the batches': NCCL gathers only CUDA tensors."""
    # As many on every rank: the padding evens them out.
    local = torch.tensor(seen, dtype=torch.int64, device=device)
    gathered = [torch.empty_like(local) for _ in range(world)]
    _HANDED_TO_COLLECTIVES.extend([local, *gathered])
    dist.all_gather(gathered, local)
    if rank != 0:
        return
    counts = {}
    for indices in gathered:
        for index in indices.tolist():
            counts[index] = counts.get(index, 0) + 1
    missing = samples - len(counts)
    repeated = sum(count - 1 for count in counts.values())
    if missing or repeated >= world or any(count > 2 for count in counts.values()):
        sys.exit(f"epoch {epoch}: {missing} samples missing, {repeated} delivered twice")
    print(f"epoch {epoch}: every one of {samples} samples once across {world} ranks ({repeated} padding)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Data-parallel training with torchrun and ctfio.torch: every rank reads its own share of each
global minibatch from the same CTF file (no DistributedSampler, no sharded files), trains a small
sequence classifier with DistributedDataParallel, and checkpoints the model, the optimizer and
the reader position in one file that any number of ranks can resume from.

    torchrun --nproc_per_node=2 examples/torchrun_ddp.py --epochs 3 --checkpoint build/ddp.pt
    torchrun --nproc_per_node=3 examples/torchrun_ddp.py --epochs 5 \
        --checkpoint build/ddp.pt --resume
    python examples/torchrun_ddp.py --epochs 5 --checkpoint build/ddp.pt --resume   # one process

The data is DIR/sample.ctf (``make demo`` writes it to build/demo; written here when missing,
in the same format): sequences of 1-5 dense ``features`` (dim 4) and one sparse one-hot
``labels`` (dim 3) per sequence. The model mean-pools each sequence and classifies it.

Notes on data parallelism with ctfio:
* ``minibatch_size`` is global: the ranks' shares of a step add up to it (about K/N each; a share
  may be empty, which still takes part in the gradient all-reduce).
* The loss is summed over the rank's sequences and divided by the step's global sequence count,
  times the world size because DDP averages gradients: the update is the global mean whatever
  the shares' sizes.
* All ranks reach the end of an epoch at the same step, because they all cut the same timeline.
* ``ds.state_dict()`` is identical on every rank; rank 0 writes it.
"""
import argparse
import gc
import os
import random
import sys

import torch
import torch.distributed as dist

# DistributedDataParallel imports torch.distributed.nn, whose functions take group.WORLD as a
# default argument: imported after init_process_group they hold the process group for good (see
# the end of main). Imported here, before the group exists, they hold None.
import torch.distributed.nn  # noqa: F401
import torch.nn.functional as F

import ctfio
import ctfio.torch


def write_sample(path, n, seed=42):
    """The demo's sample format (tools/make_sample.py): features ~ N(label, 1)."""
    rng = random.Random(seed)
    with open(path + ".tmp", "w") as f:
        for seq in range(n):
            label = rng.randrange(3)
            for i in range(rng.randint(1, 5)):
                line = "%d |features %s" % (seq, " ".join("%.3g" % rng.gauss(label, 1.0)
                                                           for _ in range(4)))
                if i == 0:
                    line += " |labels %d:1" % label
                f.write(line + "\n")
    os.replace(path + ".tmp", path)


def make_source(path):
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(path, ctfio.StreamDefs(
            features=ctfio.StreamDef(shape=4), labels=ctfio.StreamDef(shape=3, is_sparse=True))),
        randomization_seed=1, randomization_window_in_chunks=4, chunk_size_in_bytes=1024,
        num_threads=1)


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 3))

    def forward(self, x, lengths):
        """x: (num_samples, 4) packed sequences, lengths: (num_sequences,) -> logits."""
        seq = torch.repeat_interleave(torch.arange(len(lengths), device=x.device), lengths)
        pooled = x.new_zeros((len(lengths), x.shape[1])).index_add_(0, seq, x)
        pooled = pooled / lengths.clamp(min=1).unsqueeze(1).to(x.dtype)
        return self.mlp(pooled)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="build/demo")
    ap.add_argument("--sequences", type=int, default=200, help="when writing sample.ctf")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--mb", type=int, default=32, help="global minibatch size (samples)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()

    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    use_cuda = torch.cuda.is_available()
    if distributed:
        dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    device = (torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if use_cuda
              else torch.device("cpu"))
    if use_cuda:
        torch.cuda.set_device(device)

    path = os.path.join(args.data, "sample.ctf")
    if rank == 0 and not os.path.exists(path):
        os.makedirs(args.data, exist_ok=True)
        write_sample(path, args.sequences)
    if distributed:
        dist.barrier()

    torch.manual_seed(0)
    model = Classifier().to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    # Ranks come from the process group; the DataLoader adds nothing here, so iterate directly.
    ds = ctfio.torch.CTFIterableDataset(lambda: make_source(path), args.mb, device=device)
    if args.resume:
        ckpt = torch.load(args.checkpoint, map_location=device)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        ds.load_state_dict(ckpt["data"])       # also restores ds.epoch, the epochs completed
        if rank == 0:
            print("resumed %s after epoch %d (checkpoint written with %d ranks)"
                  % (args.checkpoint, ds.epoch - 1, ckpt["world_size"]))
    if rank == 0:
        print("world size %d, %s, global minibatch %d samples" % (world, device, args.mb))

    def all_sum(values):
        t = torch.tensor(values, dtype=torch.float64, device=device)
        if distributed:
            dist.all_reduce(t)
        return t.tolist()

    for epoch in range(ds.epoch, args.epochs):
        loss_sum = correct = seen = steps = empty = 0
        for batch in ds:
            x, lengths = batch["features"], batch["features_lengths"]
            y = batch["labels"].col_indices().long()       # one one-hot label per sequence
            logits = ddp(x, lengths)
            (global_seqs,) = all_sum([len(y)])
            loss = F.cross_entropy(logits, y, reduction="sum") / max(global_seqs, 1) * world
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += float(loss.detach()) * max(global_seqs, 1) / world
            correct += int((logits.argmax(1) == y).sum())
            seen += len(y)
            steps += 1
            empty += len(y) == 0
        loss_sum, correct, seen, empty = all_sum([loss_sum, correct, seen, empty])
        if rank == 0:
            print("epoch %d: %d steps, %d sequences, loss %.4f, accuracy %.3f, %d empty shares"
                  % (epoch, steps, seen, loss_sum / max(seen, 1), correct / max(seen, 1), empty))
        if args.checkpoint and rank == 0:
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(),
                     "data": ds.state_dict(), "world_size": world}
            torch.save(state, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)
        if distributed:
            dist.barrier()
    ds.close()
    if distributed:
        # The process group must be freed by destroy_process_group, which lets go of the GIL
        # while gloo joins its worker threads (a worker finishing a collective may need the
        # GIL). Freed by the DDP reducer instead, the join holds the GIL and can deadlock; never
        # freed, the threads outlive the interpreter and abort the process at exit ("terminate
        # called without an active exception"). So the reducer goes first.
        del ddp
        gc.collect()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

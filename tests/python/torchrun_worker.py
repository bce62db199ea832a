"""Run by test_torchrun.py under ``python -m torch.distributed.run --nproc_per_node=N``: every rank
reads with ctfio.torch.CTFIterableDataset (ranks detected, never passed) and writes what it saw
to OUT/<mode>-rank<R>.json; the test compares the ranks with a single-process run.

  torchrun_worker.py run    DATA OUT      steps, one sweep, empty shares, a checkpoint
  torchrun_worker.py resume DATA OUT      continue from OUT/state.json (any rank count)

Every step does an all_reduce of the local sample count, so ranks that disagreed on the number
of steps (or one waiting for data it never gets) would hang instead of passing; the test runs
this under a timeout.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import ctfio
import ctfio.torch as ct

K = 16            # the global minibatch size (index samples)
STEPS = 6         # steps recorded by `run`
STATE_AT = 4      # `run` saves the state after this many steps
RESUME_STEPS = 5  # steps recorded by `resume`


def source(path, randomize=True):
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(path, ctfio.StreamDefs(
            features=ctfio.StreamDef(field="x", shape=3),
            labels=ctfio.StreamDef(field="y", shape=5, is_sparse=True))),
        randomize=randomize, randomization_seed=3, randomization_window_in_chunks=3,
        chunk_size_in_bytes=256, num_threads=1)


def step_record(batch):
    """Keys of this rank's share and, per key, the sum of its feature values."""
    keys = batch["_keys"].tolist()
    feats = batch["features"]
    lengths = batch["features_lengths"].tolist()
    sums, at = [], 0
    for n in lengths:
        sums.append(float(feats[at:at + n].sum()))
        at += n
    return {"keys": keys, "sums": sums, "samples": int(feats.shape[0])}


def synced(ds):
    """Iterates ds, all-reducing each step's sample count (a collective, like DDP's)."""
    for batch in ds:
        t = torch.tensor([batch["features"].shape[0]], dtype=torch.int64)
        dist.all_reduce(t)
        yield batch, int(t.item())


def main():
    mode, data, out = sys.argv[1], sys.argv[2], sys.argv[3]
    env_n, env_r = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    result = {"env_detected": list(ct.detect_workers())}   # before the process group exists
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result["dist_detected"] = list(ct.detect_workers())
    result["world"] = [env_n, env_r]
    path = os.path.join(data, "data.ctf")

    if mode == "run":
        ds = ct.CTFIterableDataset(lambda: source(path), K, epoch_size=ctfio.INFINITELY_REPEAT,
                                   with_keys=True)
        result["ds_workers"] = list(ds.workers())
        steps = []
        for i, (batch, total) in enumerate(synced(ds)):
            steps.append(dict(step_record(batch), global_samples=total))
            if i + 1 == STATE_AT:
                result["state"] = ds.state_dict()
            if i + 1 == STEPS:
                break
        result["steps"] = steps

        sweep = ct.CTFIterableDataset(lambda: source(path), K, with_keys=True)
        result["sweep"] = [batch["_keys"].tolist() for batch, _ in synced(sweep)]

        # Without randomization sequence i of a sweep goes to rank i mod N, so with one
        # sequence per step every step leaves all ranks but one empty.
        tiny = ct.CTFIterableDataset(lambda: source(path, randomize=False), 1,
                                     epoch_size=ctfio.INFINITELY_REPEAT, with_keys=True,
                                     layout="padded")
        empty = []
        for i, (batch, total) in enumerate(synced(tiny)):
            empty.append({"keys": batch["_keys"].tolist(),
                          "shapes": {k: list(v.shape) for k, v in batch.items()},
                          "global_samples": total})
            if i + 1 == 4:
                break
        result["empty"] = empty
    elif mode == "resume":
        with open(os.path.join(out, "state.json")) as f:
            state = json.load(f)
        ds = ct.CTFIterableDataset(lambda: source(path), K, epoch_size=ctfio.INFINITELY_REPEAT,
                                   with_keys=True)
        ds.load_state_dict(state)
        steps = []
        for i, (batch, total) in enumerate(synced(ds)):
            steps.append(dict(step_record(batch), global_samples=total))
            if i + 1 == RESUME_STEPS:
                break
        result["steps"] = steps
    else:
        raise SystemExit("unknown mode %r" % mode)

    with open(os.path.join(out, "%s-rank%d.json" % (mode, rank)), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

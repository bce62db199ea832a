"""A process of test_torchdata.py: a torchdata StatefulDataLoader over CTFIterableDataset that
runs a whole training timeline, or stops after some batches and saves the loader's state_dict, or
starts from such a state in a fresh process; it writes the batches it saw (every tensor's bytes)
to a pickle file.

    python torchdata_worker.py DATA WORKERS EPOCHS OUT [--stop-after N STATE | --resume STATE]
"""
import functools
import pickle
import sys

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

import ctfio
import ctfio.torch as ct


def make_source(path):
    return ctfio.MinibatchSource(ctfio.CTFDeserializer(path, ctfio.StreamDefs(
        x=ctfio.StreamDef(shape=3), y=ctfio.StreamDef(shape=7, is_sparse=True))),
        randomization_window_in_chunks=3, chunk_size_in_bytes=512, randomization_seed=11)


def frozen(batch):
    """Every tensor of a batch as bytes (sparse CSR as its three parts)."""
    out = []
    for name in sorted(batch):
        t = batch[name]
        if t.layout == torch.sparse_csr:
            parts = (t.crow_indices(), t.col_indices(), t.values())
        else:
            parts = (t,)
        out.append((name, tuple(t.shape), tuple(p.contiguous().numpy().tobytes() for p in parts)))
    return out


def main():
    path, workers, epochs, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    mode = sys.argv[5] if len(sys.argv) > 5 else None
    ds = ct.CTFIterableDataset(functools.partial(make_source, path), 10, with_keys=True)
    dl = StatefulDataLoader(ds, batch_size=None, num_workers=workers)
    if mode == "--resume":
        dl.load_state_dict(torch.load(sys.argv[6], weights_only=False))
    stop = int(sys.argv[6]) if mode == "--stop-after" else None
    seen = []
    done = False
    for _ in range(epochs):
        for batch in dl:
            seen.append(frozen(batch))
            if stop is not None and len(seen) == stop:
                torch.save(dl.state_dict(), sys.argv[7])
                done = True
                break
        if done:
            break
    with open(out, "wb") as f:
        pickle.dump(seen, f)


if __name__ == "__main__":
    main()

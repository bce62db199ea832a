"""Every way PyTorch users read a ctfio file, against the direct loop, a plain PyTorch peer and
the memory limit, on one MNIST-like file in one run (BENCHMARKS.md, "The PyTorch path").

    .venv/bin/python bench/torch_paths.py [--rows 60000] [--repeat 3] [--sizes 32,256,4096]
                                          [--json out.json]

Data (generated once under bench/data/, git-ignored): 60,000 rows of a one-hot label (dim 10,
sparse) and 784 integer features (0-255, 80% zeros; ~110 MB), one row per line. Every reader
runs at ctfio's defaults (randomized, default window, chunk size and threads), one sweep, and
the consumer touches every batch (sums the features). Rows of the table:

  direct          MinibatchSource.next_minibatch(k), mb[features].values
  dataset         for batch in ctfio.torch.CTFIterableDataset(factory, k)
  dataset+keys    the same with with_keys=True
  DataLoader      torch.utils.data.DataLoader(dataset, batch_size=None)
  Stateful        torchdata's StatefulDataLoader(dataset, batch_size=None)
  session         ctfio.training_session(source, step, mb_size=k).train()
  peer            DataLoader(TensorDataset(x, y), batch_size=k, shuffle=True) over the same
                  rows already in memory (what a user would write instead)
  limit           a NumPy gather of the same rows in memory: x[perm[i:i + k]]

The runs are interleaved (--repeat rounds) and the best of each is reported, as samples/s,
as a ratio to the direct loop, and with the reader's chunk loads (stats()["perf"]).
"""

import argparse
import json
import os
import random
import time
import warnings

import numpy as np
import torch
import torch.utils.data

import ctfio
import ctfio.torch

HERE = os.path.dirname(os.path.abspath(__file__))
DIM, CLASSES = 784, 10


def write_data(path, rows, seed=5):
    if os.path.exists(path):
        return
    rng = random.Random(seed)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        for _ in range(rows):
            feats = " ".join(str(rng.randrange(1, 256)) if rng.random() < 0.2 else "0"
                             for _ in range(DIM))
            f.write("|labels %d:1 |features %s\n" % (rng.randrange(CLASSES), feats))
    os.replace(path + ".tmp", path)


def make_source(path, randomize=True):
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(path, ctfio.StreamDefs(
            features=ctfio.StreamDef(shape=DIM),
            labels=ctfio.StreamDef(shape=CLASSES, is_sparse=True))),
        randomize=randomize, max_sweeps=1)


def loads(src):
    return src.stats()["perf"]["chunks_loaded"]


def run_direct(path, k, randomize):
    src = make_source(path, randomize)
    n, acc = 0, 0.0
    while True:
        mb = src.next_minibatch(k)
        if not mb:
            break
        x = mb[src.streams.features].values
        acc += float(x[:, 0].sum())
        n += x.shape[0]
    return n, loads(src)


def run_dataset(path, k, randomize, wrap, with_keys=False):
    holder = []

    def factory():
        holder.append(make_source(path, randomize))
        return holder[-1]

    ds = ctfio.torch.CTFIterableDataset(factory, k, with_keys=with_keys)
    if wrap == "dataloader":
        it = torch.utils.data.DataLoader(ds, batch_size=None)
    elif wrap == "stateful":
        from torchdata.stateful_dataloader import StatefulDataLoader
        it = StatefulDataLoader(ds, batch_size=None)
    else:
        it = ds
    n, acc = 0, 0.0
    for b in it:
        x = b["features"]
        acc += float(x[:, 0].sum())
        n += x.shape[0]
    return n, loads(holder[0])


def run_session(path, k, randomize):
    src = make_source(path, randomize)
    seen = [0]

    def step(data, info):
        x = data[src.streams.features].values
        seen[0] += x.shape[0]

    ctfio.training_session(src, step, mb_size=k, progress=False).train()
    return seen[0], loads(src)


def load_rows(path):
    src = make_source(path, False)
    xs, ys = [], []
    while True:
        mb = src.next_minibatch(4096)
        if not mb:
            break
        xs.append(np.array(mb[src.streams.features].values))
        ys.append(np.array(mb[src.streams.labels].csr().indices, dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


def run_peer(x, y, k):
    ds = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    n, acc = 0, 0.0
    for bx, _by in torch.utils.data.DataLoader(ds, batch_size=k, shuffle=True):
        acc += float(bx[:, 0].sum())
        n += bx.shape[0]
    return n, None


def run_limit(x, k, seed=[0]):  # noqa: B006 - a call counter, kept across calls on purpose
    seed[0] += 1
    perm = np.random.default_rng(seed[0]).permutation(x.shape[0])
    n, acc = 0, 0.0
    for i in range(0, x.shape[0], k):
        b = x[perm[i:i + k]]
        acc += float(b[:, 0].sum())
        n += b.shape[0]
    return n, None


def timed(fn):
    t = time.perf_counter()
    n, chunks = fn()
    return n / (time.perf_counter() - t), chunks, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=60000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default="32,256,4096")
    ap.add_argument("--json")
    a = ap.parse_args()
    warnings.filterwarnings("ignore", message=".*set_vital.*")
    path = os.path.join(HERE, "data", "mnist_like_%d.ctf" % a.rows)
    write_data(path, a.rows)
    x, y = load_rows(path)
    torch.set_num_threads(1)
    results = []
    for randomize in (True, False):
        for k in [int(s) for s in a.sizes.split(",")]:
            r = randomize
            rows = [("direct", lambda k=k, r=r: run_direct(path, k, r)),
                    ("dataset", lambda k=k, r=r: run_dataset(path, k, r, "dataset")),
                    ("dataset+keys", lambda k=k, r=r: run_dataset(path, k, r, "dataset", True)),
                    ("DataLoader", lambda k=k, r=r: run_dataset(path, k, r, "dataloader")),
                    ("Stateful", lambda k=k, r=r: run_dataset(path, k, r, "stateful")),
                    ("session", lambda k=k, r=r: run_session(path, k, r))]
            if randomize:
                rows += [("peer", lambda k=k: run_peer(x, y, k)),
                         ("limit", lambda k=k: run_limit(x, k))]
            best = {}
            for _ in range(a.repeat):
                for name, fn in rows:
                    rate, chunks, n = timed(fn)
                    assert n == a.rows, (name, n)
                    if name not in best or rate > best[name][0]:
                        best[name] = (rate, chunks)
            base = best["direct"][0]
            for name, _ in rows:
                rate, chunks = best[name]
                results.append(dict(randomize=randomize, k=k, row=name, samples_per_s=rate,
                                    ratio=rate / base, chunks_loaded=chunks))
                print("%-9s k=%-5d %-13s %10.0f samples/s  %5.2f x direct  chunks %s"
                      % ("random" if randomize else "in order", k, name, rate, rate / base,
                         "-" if chunks is None else chunks), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

"""Benchmark of ctfio.torch: samples per second of ``CTFIterableDataset`` against
``torch.utils.data.DataLoader`` over a map-style Dataset that parses the same CTF lines in
Python, on the same file, in the same run.

    .venv/bin/python bench/bench_torch.py [--quick] [--lines N] [--repeat 3] [--json out.json]

Data (generated once under bench/data/, git-ignored): line mode, every line one sample,
``|labels k:1 |features <64 values>`` (a sparse one-hot label of dim 10, dense features of dim
64, values %.4g of N(0, 1)). Each run is one epoch over the whole file in minibatches of 256
samples, randomized on both sides, and the consumer touches every batch (sums the features,
reads the labels):

  ctfio direct         for batch in CTFIterableDataset(source, 256)  (the C reader: 2 threads)
  ctfio DataLoader(0)  DataLoader(dataset, batch_size=None)
  ctfio DataLoader(2)  DataLoader(dataset, batch_size=None, num_workers=2), a source factory
  python Dataset(0)    DataLoader(LinesDataset, batch_size=256, shuffle=True)
  python Dataset(2)    the same, num_workers=2

LinesDataset holds the file's lines (read once, not timed, as a Dataset's __init__ would) and
parses one line per __getitem__ into a float32 feature tensor and an int64 label; the default
collate stacks them. The runs are interleaved (--repeat rounds) and the best of each is
reported, as wall-clock samples/s and as samples per CPU-second of the benchmark process and
its DataLoader workers (the fairer figure on a loaded machine).
"""

import argparse
import json
import os
import platform
import random
import resource
import time

import torch
import torch.utils.data

import ctfio
import ctfio.torch

HERE = os.path.dirname(os.path.abspath(__file__))
DIM, CLASSES, MB = 64, 10, 256


def write_data(path, lines, seed=11):
    if os.path.exists(path):
        return
    rng = random.Random(seed)
    pool = ["%.4g" % rng.gauss(0, 1) for _ in range(4096)]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        for _ in range(lines):
            feats = " ".join(pool[rng.randrange(4096)] for _ in range(DIM))
            f.write("|labels %d:1 |features %s\n" % (rng.randrange(CLASSES), feats))
    os.replace(path + ".tmp", path)


def make_source(path):
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(path, ctfio.StreamDefs(
            features=ctfio.StreamDef(shape=DIM),
            labels=ctfio.StreamDef(shape=CLASSES, is_sparse=True))),
        max_sweeps=1, num_threads=2, chunk_size_in_bytes=1 << 20)


class SourceFactory:
    """Picklable, for DataLoader workers."""

    def __init__(self, path):
        self.path = path

    def __call__(self):
        return make_source(self.path)


class LinesDataset(torch.utils.data.Dataset):
    """The baseline: CTF lines parsed in Python, one per __getitem__."""

    def __init__(self, path):
        with open(path) as f:
            self.lines = f.readlines()

    def __len__(self):
        return len(self.lines)

    def __getitem__(self, i):
        feats = label = None
        for field in self.lines[i].split("|")[1:]:
            name, _, rest = field.partition(" ")
            if name == "features":
                feats = torch.tensor([float(v) for v in rest.split()], dtype=torch.float32)
            elif name == "labels":
                label = int(rest.split(":", 1)[0])
        return feats, label


def consume_ctfio(batches):
    n, acc = 0, 0.0
    for b in batches:
        x, y = b["features"], b["labels"]
        acc += float(x.sum())
        acc += int(y.col_indices().sum())
        n += x.shape[0]
    return n


def consume_python(batches):
    n, acc = 0, 0.0
    for x, y in batches:
        acc += float(x.sum())
        acc += int(y.sum())
        n += x.shape[0]
    return n


def cpu_seconds():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def timed(run):
    t0, c0 = time.perf_counter(), cpu_seconds()
    n = run()
    return n, time.perf_counter() - t0, cpu_seconds() - c0


def runs(path, lines_ds):
    def ctfio_direct():
        ds = ctfio.torch.CTFIterableDataset(lambda: make_source(path), MB,
                                            epoch_size=ctfio.INFINITELY_REPEAT)
        n = consume_ctfio(ds)
        ds.close()
        return n

    def ctfio_loader(workers):
        def run():
            ds = ctfio.torch.CTFIterableDataset(SourceFactory(path), MB,
                                                epoch_size=ctfio.INFINITELY_REPEAT)
            n = consume_ctfio(torch.utils.data.DataLoader(ds, batch_size=None,
                                                          num_workers=workers))
            ds.close()
            return n
        return run

    def python_loader(workers):
        def run():
            return consume_python(torch.utils.data.DataLoader(
                lines_ds, batch_size=MB, shuffle=True, num_workers=workers,
                generator=torch.Generator().manual_seed(0)))
        return run

    return [("ctfio direct", ctfio_direct), ("ctfio DataLoader(0)", ctfio_loader(0)),
            ("ctfio DataLoader(2)", ctfio_loader(2)), ("python Dataset(0)", python_loader(0)),
            ("python Dataset(2)", python_loader(2))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="40k lines instead of 200k")
    ap.add_argument("--lines", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    lines = args.lines or (40000 if args.quick else 200000)
    path = os.path.join(HERE, "data", "torch_%d.ctf" % lines)
    write_data(path, lines)
    size_mb = os.path.getsize(path) / 2**20
    torch.set_num_threads(1)
    lines_ds = LinesDataset(path)
    best = {}
    for _ in range(args.repeat):
        for name, run in runs(path, lines_ds):
            n, wall, cpu = timed(run)
            assert n == lines, (name, n, lines)
            w, c = best.get(name, (0.0, 0.0))
            best[name] = (max(w, n / wall), max(c, n / cpu if cpu > 0 else 0.0))
    base = best["python Dataset(0)"]
    print("### ctfio.torch vs a Python-parsing DataLoader (bench/bench_torch.py)\n")
    print("%s, %d cores, Python %s, torch %s; %s: %d lines, %.1f MiB (dense 64 + sparse "
          "label 10), minibatch %d, best of %d, load average %.1f\n"
          % (platform.processor() or platform.machine(), os.cpu_count(),
             platform.python_version(), torch.__version__, os.path.relpath(path), lines,
             size_mb, MB, args.repeat, os.getloadavg()[0]))
    print("| reader | samples/s | samples per CPU-s | vs python Dataset(0), wall |")
    print("|---|---:|---:|---:|")
    for name, (w, c) in best.items():
        print("| %s | %.0f | %.0f | %.1fx |" % (name, w, c, w / base[0]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"lines": lines, "mb": MB, "results": best}, f, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench/cbf.py -- CBF against CTF on the same floats, and the memory-speed limit, in one run.

Every reader delivers one randomized sweep at the defaults (MinibatchSource's window, threads,
chunk sizes) in minibatches of --mb samples, each stream's asarray() taken; the limit is
numpy.fromfile of the raw float32 rows plus a shuffled gather of the same minibatches. Prints a
Markdown table of float bytes per second (median of --reps) and the ratios.

    .venv/bin/python bench/cbf.py [--rows 150000] [--dim 100] [--mb 256] [--reps 3]
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import ctfio

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")


def make_files(rows, dim):
    os.makedirs(DATA, exist_ok=True)
    ctf = os.path.join(DATA, "cbf_dense_%d_%d.ctf" % (rows, dim))
    raw = ctf[:-4] + ".f32"
    rng = np.random.default_rng(1)
    if not os.path.exists(ctf) or not os.path.exists(raw):
        x = rng.normal(0, 1, (rows, dim)).astype(np.float32)
        x.tofile(raw)
        with open(ctf + ".tmp", "w") as f:
            for i in range(0, rows, 10000):
                block = x[i:i + 10000]
                f.write("".join("|x " + " ".join("%.6g" % v for v in r) + "\n" for r in block))
        os.replace(ctf + ".tmp", ctf)
    cbf = ctf[:-4] + ".bin"
    streams = ctfio.StreamDefs(x=ctfio.StreamDef(field="x", shape=dim))
    if not os.path.exists(cbf):
        ctfio.convert(ctf, cbf, format="cbf", streams=streams, show_config=False)
    return ctf, cbf, raw, streams


def sweep(source, mb):
    n = 0
    t = time.perf_counter()
    info = source.streams["x"]
    while True:
        data = source.next_minibatch(mb)
        if not data:
            break
        n += data[info].asarray().nbytes
    return n, time.perf_counter() - t


def read_ctf(ctf, streams, mb):
    return sweep(ctfio.MinibatchSource(ctfio.CTFDeserializer(ctf, streams), max_sweeps=1), mb)


def read_cbf(cbf, mb):
    return sweep(ctfio.MinibatchSource(ctfio.CBFDeserializer(cbf), max_sweeps=1), mb)


def limit(raw, rows, dim, mb):
    t = time.perf_counter()
    x = np.fromfile(raw, dtype=np.float32).reshape(rows, dim)
    perm = np.random.default_rng(2).permutation(rows)
    n = 0
    for i in range(0, rows, mb):
        n += x[perm[i:i + mb]].nbytes
    return n, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=150000)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    ctf, cbf, raw, streams = make_files(a.rows, a.dim)
    runs = {"ctf": [], "cbf": [], "limit": []}
    for _ in range(a.reps):  # interleaved, so that a busy moment hits every reader alike
        for name, fn in (("ctf", lambda: read_ctf(ctf, streams, a.mb)),
                         ("cbf", lambda: read_cbf(cbf, a.mb)),
                         ("limit", lambda: limit(raw, a.rows, a.dim, a.mb))):
            n, s = fn()
            assert n == a.rows * a.dim * 4, (name, n)
            runs[name].append(n / s / 1e9)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print("| reader (one randomized sweep, %d x %d float32, minibatch %d) | GB/s of floats |"
          % (a.rows, a.dim, a.mb))
    print("|---|---|")
    print("| CTF text (%.0f MB), MinibatchSource defaults | %.3f |"
          % (os.path.getsize(ctf) / 1e6, med["ctf"]))
    print("| CBF (%.0f MB), MinibatchSource defaults | %.3f |"
          % (os.path.getsize(cbf) / 1e6, med["cbf"]))
    print("| numpy.fromfile + shuffled gather (the limit) | %.3f |" % med["limit"])
    print()
    print("CBF / CTF = %.2f, CBF / limit = %.2f (runs: %s)"
          % (med["cbf"] / med["ctf"], med["cbf"] / med["limit"],
             {k: ["%.3f" % x for x in v] for k, v in runs.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""bench/chunk_cache.py -- sweep 2 against sweep 1 with the chunk cache, and without it.

One source reads two randomized sweeps of a CTF file larger than the randomization window
(--window chunks of the default 32 MiB), in minibatches of --mb samples, each stream's asarray()
taken: with chunk_cache= a fresh directory (sweep 1 parses and stores every chunk, sweep 2
decodes the stored chunks) and without one (both sweeps parse). Prints the seconds of each
sweep (median of --reps, interleaved), the ratios, and the cached run's stage counters.

    .venv/bin/python bench/chunk_cache.py [--rows 150000] [--dim 100] [--window 2] [--reps 3]
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import ctfio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cbf import make_files  # noqa: E402  (the same generated floats as the CBF benchmark)


def two_sweeps(ctf, streams, mb, window, cache):
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer(ctf, streams), max_sweeps=2,
                                randomization_window_in_chunks=window, chunk_cache=cache)
    info = src.streams["x"]
    times, n, t = [], 0, time.perf_counter()
    while True:
        data = src.next_minibatch(mb)
        if not data:
            break
        md = data[info]
        n += md.asarray().nbytes
        if md.end_of_sweep:
            now = time.perf_counter()
            times.append(now - t)
            t = now
    return n, times, src.stats()["perf"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=150000)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--window", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    ctf, _, _, streams = make_files(a.rows, a.dim)
    size = os.path.getsize(ctf)
    assert size > a.window * (32 << 20), "the file must be larger than the window"
    runs = {"plain": [], "cached": []}
    perf = None
    for _ in range(a.reps):
        for name in ("plain", "cached"):
            d = tempfile.mkdtemp(prefix="ctfio_chunk_cache_") if name == "cached" else None
            try:
                n, times, p = two_sweeps(ctf, streams, a.mb, a.window, d)
            finally:
                if d:
                    shutil.rmtree(d, ignore_errors=True)
            assert n == 2 * a.rows * a.dim * 4 and len(times) == 2, (name, n, times)
            runs[name].append(times)
            if name == "cached":
                perf = p
    med = {k: [statistics.median(t[i] for t in v) for i in (0, 1)] for k, v in runs.items()}
    gb = a.rows * a.dim * 4 / 1e9
    print("| %d x %d float32, CTF text %.0f MB, window %d chunks | sweep 1 s | sweep 2 s | "
          "sweep 2 GB/s of floats |" % (a.rows, a.dim, size / 1e6, a.window))
    print("|---|---|---|---|")
    for k, label in (("plain", "no chunk cache"), ("cached", "chunk_cache=DIR (empty at open)")):
        print("| %s | %.2f | %.2f | %.3f |" % (label, med[k][0], med[k][1], gb / med[k][1]))
    print()
    print("cached sweep 2 / sweep 1 = %.2f; cached sweep 2 / uncached sweep 2 = %.2f"
          % (med["cached"][1] / med["cached"][0], med["cached"][1] / med["plain"][1]))
    print("cached run's counters: hits %d, misses %d, read %.2f s, parse+decode %.2f s, "
          "pack %.2f s, waits %.2f s, verdict: %s"
          % (perf["chunk_cache_hits"], perf["chunk_cache_misses"], perf["read_ns"] / 1e9,
             perf["parse_ns"] / 1e9, perf["pack_ns"] / 1e9, perf["wait_ns"] / 1e9,
             perf.get("verdict", {}).get("text", "")))
    print("runs (s):", {k: [["%.2f" % x for x in t] for t in v] for k, v in runs.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

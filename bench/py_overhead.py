"""Per-minibatch Python overhead: microseconds per call of ``next_minibatch(64)`` on a small
in-memory-resident CTF file, of the same through ``ctfio.torch.CTFIterableDataset`` at batch 64,
and of ``MinibatchSourceFromData.next_minibatch(64)`` with ``.values`` read once.

    .venv/bin/python bench/py_overhead.py [--n 20000] [--repeat 5]

The file is small (one chunk, kept in memory), so the time is the Python layer plus the C
reader's cut and gather of 64 one-sample sequences. Printed: the best of ``--repeat`` runs, as
CPU time of the calling thread (``time.thread_time``: what the caller pays, steady on a loaded
machine) and as wall time.
"""

import argparse
import os
import tempfile
import time

import numpy as np

import ctfio


def _file(dirname, rows=4096, dim=16):
    path = os.path.join(dirname, "small.ctf")
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        for i in range(rows):
            f.write("|x %s |y %d:1\n" % (" ".join("%.3f" % v for v in rng.random(dim)), i % 10))
    return path


def _source(path):
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(path, ctfio.StreamDefs(
            x=ctfio.StreamDef(field="x", shape=16), y=ctfio.StreamDef(field="y", shape=10,
                                                                       is_sparse=True))),
        keep_data_in_memory=True)


def _best(fn, n, repeat):
    cpu = wall = float("inf")
    for _ in range(repeat):
        c0, t0 = time.thread_time(), time.perf_counter()
        fn(n)
        cpu = min(cpu, time.thread_time() - c0)
        wall = min(wall, time.perf_counter() - t0)
    return cpu / n * 1e6, wall / n * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000, help="minibatches per run")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = _file(d)
        src = _source(path)
        for _ in range(200):
            src.next_minibatch(64)       # warm: the whole file parsed and resident

        def plain(n):
            for _ in range(n):
                src.next_minibatch(64)

        def values(n):
            sx = src.streams.x
            for _ in range(n):
                src.next_minibatch(64)[sx].values

        rows = [("next_minibatch(64)", _best(plain, args.n, args.repeat)),
                ("next_minibatch(64) + .values", _best(values, args.n, args.repeat))]
        try:
            import ctfio.torch
        except ImportError:
            ctfio.torch = None
        if ctfio.torch is not None:
            ds = ctfio.torch.CTFIterableDataset(src, 64, epoch_size=ctfio.INFINITELY_REPEAT)
            it = iter(ds)
            for _ in range(200):
                next(it)

            def torch_loop(n):
                for _ in range(n):
                    next(it)
            rows.append(("CTFIterableDataset, batch 64", _best(torch_loop, args.n, args.repeat)))
        mem = ctfio.MinibatchSourceFromData(dict(
            x=np.random.default_rng(1).random((4096, 16), dtype=np.float32)))
        mx = mem.streams.x

        def in_memory(n):
            for _ in range(n):
                mem.next_minibatch(64)[mx].values
        rows.append(("MinibatchSourceFromData(64) + .values", _best(in_memory, args.n,
                                                                   args.repeat)))
        src.close()
    print("| case | CPU us per minibatch (calling thread) | wall us |\n|---|---:|---:|")
    for name, (cpu, wall) in rows:
        print("| %s | %.1f | %.1f |" % (name, cpu, wall))


if __name__ == "__main__":
    main()

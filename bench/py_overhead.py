"""Per-minibatch Python overhead: microseconds and minibatches per second of
``next_minibatch(K)`` on a small in-memory-resident CTF file, of the same through
``ctfio.torch.CTFIterableDataset`` at batch K, and of ``MinibatchSourceFromData.next_minibatch``
with ``.values`` read once; K = 64 and 4096 by default. Two rows split the torch row: the
dataset's tensors of one minibatch alone, and the same torch and NumPy calls written out.

    .venv/bin/python bench/py_overhead.py [--n 20000] [--repeat 5] [--sizes 64,4096]

The file (16,384 lines: dense ``x`` dim 16, sparse ``y`` dim 10, one-sample sequences) is one
chunk kept in memory, so the time is the Python layer plus the C reader's cut and gather. The
row ``Reader.next(K)`` is the extension's bare call (the C library's ``ctf_reader_next``, the
minibatch freed when the next one arrives, plus the binding's argument parsing and GIL
release): what the C side costs. Every other row's "Python share" is its time minus that one.
Printed: the best of ``--repeat`` runs, as CPU time of the calling thread (``time.thread_time``:
what the caller pays, steady on a loaded machine) and as wall time.
"""

import argparse
import os
import tempfile
import time

import numpy as np

import ctfio


def _file(dirname, rows=16384, dim=16):
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


def _rows(src, k, n, repeat):
    """(name, (cpu us, wall us)) for batch size k; the first row is the bare C call."""
    reader, sx = src._reader, src.streams.x

    def bare(n):
        for _ in range(n):
            reader.next(k)

    def plain(n):
        for _ in range(n):
            src.next_minibatch(k)

    def values(n):
        for _ in range(n):
            _ = src.next_minibatch(k)[sx].values  # the property builds the array

    rows = [("Reader.next(%d) (C call + binding)" % k, _best(bare, n, repeat)),
            ("next_minibatch(%d)" % k, _best(plain, n, repeat)),
            ("next_minibatch(%d) + .values" % k, _best(values, n, repeat))]
    try:
        import ctfio.torch as ct
    except ImportError:
        ct = None
    if ct is not None:
        ds = ct.CTFIterableDataset(src, k, epoch_size=ctfio.INFINITELY_REPEAT)
        it = iter(ds)
        for _ in range(50):
            next(it)

        def torch_loop(n):
            for _ in range(n):
                next(it)
        rows.append(("CTFIterableDataset, batch %d" % k, _best(torch_loop, n, repeat)))
        it.close()
    if ct is not None and hasattr(ct, "_reader_plan"):   # (an older ctfio has no plan)
        # The dataset's tensors of one minibatch, made again and again: what the batch costs
        # without the C call and the driver; then the same torch and NumPy calls written out
        # (no plan, no loop): torch's and NumPy's own cost, the floor of any Python adapter.
        mb = reader.next(k)
        plan = ct._reader_plan(src, None, "packed", False)

        def tensors(n):
            for _ in range(n):
                ct._reader_batch(mb, plan, False, True)

        torch, asarray, i32, i64 = ct.torch, np.asarray, np.int32, np.int64

        def calls(n):
            buf, from_numpy, csr = mb.buffer, torch.from_numpy, torch.sparse_csr_tensor
            for _ in range(n):
                from_numpy(asarray(buf(0, 0)))
                from_numpy(asarray(buf(0, 1)).astype(i64))
                v = from_numpy(asarray(buf(1, 0)))
                p = asarray(buf(1, 2))
                csr(from_numpy(p.astype(i32)), from_numpy(asarray(buf(1, 3))), v,
                    size=(p.shape[0] - 1, 10), check_invariants=False)
                from_numpy(asarray(buf(1, 1)).astype(i64))
        rows.append(("- its tensors alone (the plan over one minibatch)",
                     _best(tensors, n, repeat)))
        rows.append(("- the same torch/NumPy calls written out", _best(calls, n, repeat)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000, help="minibatches per run (batch 64; "
                    "fewer for larger batches, the same number of samples)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="64,4096", help="batch sizes, comma-separated")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    out = []
    with tempfile.TemporaryDirectory() as d:
        path = _file(d)
        src = _source(path)
        for _ in range(300):
            src.next_minibatch(64)       # warm: the whole file parsed and resident
        for k in sizes:
            n = max(200, args.n * 64 // k)
            rows = _rows(src, k, n, args.repeat)
            mem = ctfio.MinibatchSourceFromData(dict(
                x=np.random.default_rng(1).random((16384, 16), dtype=np.float32)))
            mx = mem.streams.x

            def in_memory(n, k=k, mem=mem, mx=mx):
                for _ in range(n):
                    _ = mem.next_minibatch(k)[mx].values  # the property builds the array
            rows.append(("MinibatchSourceFromData(%d) + .values" % k,
                         _best(in_memory, n, args.repeat)))
            out.append(rows)
        src.close()
    print("| case | CPU us per minibatch (calling thread) | minibatches/s (CPU) | "
          "Python share, CPU us | wall us |\n|---|---:|---:|---:|---:|")
    for rows in out:
        c_cpu = rows[0][1][0]
        for i, (name, (cpu, wall)) in enumerate(rows):
            share = "" if i == 0 or name.startswith(("MinibatchSourceFromData", "-")) else \
                "%.1f" % (cpu - c_cpu)
            print("| %s | %.1f | %.0f | %s | %.1f |" % (name, cpu, 1e6 / cpu, share, wall))


if __name__ == "__main__":
    main()

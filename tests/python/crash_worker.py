"""A training loop for test_crash_resume.py, run as a subprocess that the test kills with SIGKILL.

    python crash_worker.py DATA OUT STATE --workers N --rank R --minibatches T --every K

It reads T minibatches from a randomized ctfio.MinibatchSource (two prefetch threads, small
chunks) as worker R of N, and appends each minibatch's bytes (its index, keys, then per stream
the lengths and the values; sparse streams also indptr and indices) to OUT, unbuffered. Every K
minibatches it writes STATE atomically (a temporary file, fsync, os.replace): the source's
checkpoint state, the number of minibatches done and OUT's length at that point.

Started with an existing STATE it resumes: it cuts OUT back to the recorded length (whatever a
killed run wrote after its last checkpoint), restores the source and continues. So OUT after any
number of kills and resumes must equal OUT of one uninterrupted run, bit for bit.
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np

import ctfio


def make_source(path):
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(path, ctfio.StreamDefs(
            x=ctfio.StreamDef(field="x", shape=3),
            y=ctfio.StreamDef(field="y", shape=10, is_sparse=True))),
        randomize=True, randomization_seed=7, randomization_window_in_chunks=3,
        chunk_size_in_bytes=400, num_threads=2, prefetch_chunks=4, trace_level=0)


def minibatch_bytes(index, mb, src):
    """The minibatch as bytes: index, keys, then per stream lengths + values (+ CSR arrays)."""
    parts = [struct.pack("<q", index)]
    if not mb:
        return parts[0] + b"END"
    x, y = mb[src.streams.x], mb[src.streams.y]
    keys = np.asarray(x.keys, dtype=np.uint64)
    parts += [struct.pack("<q", len(keys)), keys.tobytes()]
    for s in (x, y):
        parts += [np.asarray(s.lengths).tobytes(), np.asarray(s.values).tobytes()]
        if s.is_sparse:
            parts += [np.asarray(s.indptr).tobytes(), np.asarray(s.indices).tobytes()]
    return b"".join(parts)


def save_state(path, state):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("state")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--minibatches", type=int, default=60)
    ap.add_argument("--mb-size", type=int, default=16)
    ap.add_argument("--every", type=int, default=3)
    ap.add_argument("--sleep", type=float, default=0.0)
    a = ap.parse_args()

    src = make_source(a.data)
    start = 0
    if os.path.exists(a.state):
        with open(a.state) as f:
            st = json.load(f)
        src.restore_from_checkpoint(st["source"])
        start = st["minibatches"]
        with open(a.out, "r+b") as f:
            f.truncate(st["out_len"])
        print("resumed at minibatch %d" % start, file=sys.stderr)
    else:
        open(a.out, "wb").close()

    # Unbuffered: a killed run leaves the minibatches written after its last checkpoint behind,
    # which the resume must cut off.
    with open(a.out, "ab", buffering=0) as out:
        for i in range(start, a.minibatches):
            mb = src.next_minibatch(a.mb_size, num_data_partitions=a.workers,
                                    partition_index=a.rank)
            out.write(minibatch_bytes(i, mb, src))
            if a.sleep:
                time.sleep(a.sleep)  # the "training step": slow enough to be killed mid-run
            if (i + 1) % a.every == 0:
                save_state(a.state, {"source": src.get_checkpoint_state(),
                                     "minibatches": i + 1, "out_len": out.tell()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Corpora of many files and deserializers joined by key, through the Python API:
``CTFDeserializer([files] or "pattern", ...)`` and ``MinibatchSource([d1, d2, ...])``, with
workers, elastic restore, frame mode, truncated BPTT, keepDataInMemory, the torch adapter and
training_session; and the memory bound of a corpus much larger than the window (peak RSS of a
child process)."""
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import ctfio
from ctfio import INFINITELY_REPEAT, training_session

N = 60


def gen(n=N, seed=5, key_base=0, equal=False):
    """n sequences: key, x samples (dense, dim 2), y samples (sparse, dim 6), 1-3 each."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        nx = rng.randint(1, 3)
        ny = nx if equal else rng.randint(1, 3)
        xs = [[rng.randint(0, 99), rng.randint(0, 99)] for _ in range(nx)]
        ys = [(rng.randrange(6), rng.randint(1, 9)) for _ in range(ny)]
        out.append((key_base + i, xs, ys))
    return out


def render(seqs, wx=True, wy=True):
    lines = []
    for key, xs, ys in seqs:
        for l in range(max(len(xs) if wx else 0, len(ys) if wy else 0)):
            line = str(key)
            if wx and l < len(xs):
                line += " |x %d %d" % tuple(xs[l])
            if wy and l < len(ys):
                line += " |y %d:%d" % ys[l]
            lines.append(line + "\n")
    return "".join(lines)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return str(path)


X = dict(x=ctfio.StreamDef(shape=2))
Y = dict(y=ctfio.StreamDef(shape=6, is_sparse=True))
XY = dict(x=ctfio.StreamDef(shape=2), y=ctfio.StreamDef(shape=6, is_sparse=True))


def source(deserializers, **kw):
    kw.setdefault("randomization_window_in_chunks", 5)
    kw.setdefault("randomization_seed", 3)
    kw.setdefault("num_threads", 1)
    return ctfio.MinibatchSource(deserializers, **kw)


def digest(mb):
    """A minibatch as comparable Python data: per stream name, keys and values."""
    out = []
    for si in sorted(mb, key=lambda s: s.name):
        md = mb[si]
        vals = md.csr().toarray() if md.is_sparse else np.asarray(md.values)
        out.append((si.name, md.keys.tolist(), md.num_samples, md.lengths.tolist(),
                    vals.tolist()))
    return out


def read(src, k, calls=10 ** 6, **kw):
    res = []
    for _ in range(calls):
        mb = src.next_minibatch(k, **kw)
        if not mb:
            break
        res.append(digest(mb))
    return res


@pytest.fixture
def corpus(tmp_path):
    seqs = gen()
    d = tmp_path / "shards"
    d.mkdir()
    paths = []
    for f in range(4):
        paths.append(write(d / ("part-%05d.ctf" % f), render(seqs[f * N // 4:(f + 1) * N // 4])))
    whole = write(tmp_path / "whole.ctf", render(seqs))
    return paths, whole, str(d / "part-*.ctf")


def test_corpus_list_and_pattern_equal_the_concatenation(corpus):
    paths, whole, pattern = corpus
    for k in (1, 5, 40):
        ref = read(source(ctfio.CTFDeserializer(whole, XY), randomize=False, max_sweeps=2), k)
        for files in (paths, pattern):
            src = source(ctfio.CTFDeserializer(files, XY), randomize=False, max_sweeps=2)
            assert src.files == paths
            assert read(src, k) == ref


def test_corpus_keys_carry_the_file(corpus):
    paths, _, pattern = corpus
    src = source(ctfio.CTFDeserializer(pattern, XY), randomize=False, max_sweeps=1)
    mb = src.next_minibatch(10 ** 6)
    md = mb[src.streams.x]
    assert md.files.tolist() == [f for f in range(4) for _ in range(N // 4)]
    assert md.keys.tolist() == list(range(N))


def test_corpus_randomized_workers_and_elastic_restore(corpus):
    paths, _, _ = corpus
    kw = dict(max_sweeps=2, chunk_size_in_bytes=60)

    def keys_of(mbs):
        return [k for mb in mbs for k in mb[0][1]]

    for workers in (1, 2, 3, 4):
        srcs = [source(ctfio.CTFDeserializer(paths, XY), **kw) for _ in range(workers)]
        got = []
        while True:
            mbs = [s.next_minibatch(7, num_data_partitions=workers, partition_index=r)
                   for r, s in enumerate(srcs)]
            if not any(mbs):
                break
            got += [k for mb in mbs if mb for k in mb[srcs[0].streams.x].keys.tolist()]
        assert sorted(got) == sorted(list(range(N)) * 2)
    # 2 workers, then 3 from worker 0's checkpoint
    srcs = [source(ctfio.CTFDeserializer(paths, XY), **kw) for _ in range(2)]
    got = []
    for _ in range(6):
        for r, s in enumerate(srcs):
            mb = s.next_minibatch(7, num_data_partitions=2, partition_index=r)
            got += mb[s.streams.x].keys.tolist() if mb else []
    state = srcs[0].get_checkpoint_state()
    assert len(state["files"].split(";")) == 4
    srcs = [source(ctfio.CTFDeserializer(paths, XY), **kw) for _ in range(3)]
    for s in srcs:
        s.restore_from_checkpoint(state)
    while True:
        mbs = [s.next_minibatch(7, num_data_partitions=3, partition_index=r)
               for r, s in enumerate(srcs)]
        if not any(mbs):
            break
        got += [k for mb in mbs if mb for k in mb[srcs[0].streams.x].keys.tolist()]
    assert sorted(got) == sorted(list(range(N)) * 2)


def test_corpus_changed_file_is_refused_naming_it(corpus):
    paths, _, _ = corpus
    src = source(ctfio.CTFDeserializer(paths, XY))
    src.next_minibatch(5)
    state = src.get_checkpoint_state()
    write(paths[2], render(gen(N // 4, seed=99, key_base=30)))
    src2 = source(ctfio.CTFDeserializer(paths, XY))
    with pytest.raises(Exception) as e:
        src2.restore_from_checkpoint(state)
    assert paths[2] in str(e.value) and "file 2 of the data" in str(e.value)


@pytest.fixture
def composite(tmp_path):
    seqs = gen(equal=False)
    both = write(tmp_path / "both.ctf", render(seqs))
    xs = write(tmp_path / "x.ctf", render(seqs, wy=False))
    perm = list(range(N))
    random.Random(1).shuffle(perm)
    ys = write(tmp_path / "y.ctf", render([seqs[i] for i in perm], wx=False))
    return both, xs, ys, seqs


def pair(composite, **kw):
    both, xs, ys, _ = composite
    kw.setdefault("chunk_size_in_bytes", 1)  # a chunk per sequence in both layouts
    single = source(ctfio.CTFDeserializer(both, XY), **kw)
    joined = source([ctfio.CTFDeserializer(xs, X), ctfio.CTFDeserializer(ys, Y)], **kw)
    return single, joined


@pytest.mark.parametrize("opts", [
    dict(), dict(randomize=False),
    dict(randomization_window_in_samples=20, randomization_window_in_chunks=None),
    dict(keep_data_in_memory=True), dict(chunk_size_in_bytes=1 << 20)])
def test_composite_equals_the_single_file(composite, opts):
    for k in (1, 4, 9, 100):
        single, joined = pair(composite, max_sweeps=3, **opts)
        assert [si.name for si in joined.stream_infos()] == ["x", "y"]
        a, b = read(single, k), read(joined, k)
        assert a and a == b


def test_composite_workers_restore_and_bptt(tmp_path, composite):
    single, joined = pair(composite, max_sweeps=2)
    for r in range(2):
        s1, j1 = pair(composite, max_sweeps=2)
        assert read(s1, 6, num_data_partitions=2, partition_index=r) == \
            read(j1, 6, num_data_partitions=2, partition_index=r)
    # a checkpoint of the composite continues it, and with three workers (elastic restore)
    _, j1 = pair(composite, max_sweeps=2)
    read(j1, 6, calls=4)
    state = j1.get_checkpoint_state()
    rest = read(j1, 6)
    _, j2 = pair(composite, max_sweeps=2)
    j2.restore_from_checkpoint(state)
    assert read(j2, 6) == rest
    shares = []
    for r in range(3):
        _, j3 = pair(composite, max_sweeps=2)
        j3.restore_from_checkpoint(state)
        shares.append(read(j3, 6, num_data_partitions=3, partition_index=r))
    assert sorted(k for share in shares for mb in share for k in mb[0][1]) == \
        sorted(k for mb in rest for k in mb[0][1])
    # truncated BPTT and frame mode on data that allows them
    seqs = gen(equal=True)
    both = write(tmp_path / "b2.ctf", render(seqs))
    xs = write(tmp_path / "x2.ctf", render(seqs, wy=False))
    ys = write(tmp_path / "y2.ctf", render(seqs[::-1], wx=False))
    for kw in (dict(truncation_length=2), dict(frame_mode=True, max_errors=1000)):
        a = source(ctfio.CTFDeserializer(both, XY), chunk_size_in_bytes=1, max_sweeps=1,
                   log=lambda *a: None, **kw)
        b = source([ctfio.CTFDeserializer(xs, X), ctfio.CTFDeserializer(ys, Y)],
                   chunk_size_in_bytes=1, max_sweeps=1, log=lambda *a: None, **kw)
        assert read(a, 6) == read(b, 6)


def test_composite_missing_keys_dropped_and_counted(tmp_path, composite):
    _, xs, _, seqs = composite
    ys = write(tmp_path / "y-some.ctf", render([s for s in seqs if s[0] % 7], wx=False)
               + "9999 |y 1:1\n")
    logs = []
    src = source([ctfio.CTFDeserializer(xs, X), ctfio.CTFDeserializer(ys, Y)], randomize=False,
                 max_sweeps=1, log=lambda *a: logs.append(a))
    got = [k for mb in read(src, 50) for k in mb[0][1]]
    assert got == [s[0] for s in seqs if s[0] % 7]
    st = src.stats()
    assert st["keys_missing"] == len([s for s in seqs if s[0] % 7 == 0])
    assert st["keys_unmatched"] == 1
    assert st["dropped_sequences"] == st["keys_missing"]
    assert any("sequence key 14 has no match" in str(a) for a in logs)


def _sweep_facts(src):
    """(samples_per_sweep of the first minibatch, of the checkpoint, of the source's timeline,
    the position at the first end of sweep)."""
    first = ends = None
    while ends is None:
        mb = src.next_minibatch(1)  # one sequence each: a sweep ends at its exact total
        md = next(iter(mb.values()))
        first = md.samples_per_sweep if first is None else first
        if md.end_of_sweep:
            ends = md.position
    return first, src.get_checkpoint_state()["samples_per_sweep"], src._timeline()[1], ends


def test_samples_per_sweep_counts_every_file_and_only_joined_sequences(tmp_path, corpus,
                                                                       composite):
    # The drivers cut epochs (FULL_DATA_SWEEP) with samples_per_sweep: it is the whole
    # corpus's, not its first file's, and a join's after the sequences without a match.
    paths, whole, _ = corpus
    one = _sweep_facts(source(ctfio.CTFDeserializer(whole, XY), randomize=False))
    many = _sweep_facts(source(ctfio.CTFDeserializer(paths, XY), randomize=False))
    assert many == one and len(set(many)) == 1
    first_file = source(ctfio.CTFDeserializer(paths[0], XY))._timeline()[1]
    assert many[0] > first_file
    _, xs, _, seqs = composite
    ys = write(tmp_path / "y-some.ctf", render([s for s in seqs if s[0] % 7], wx=False))
    joined = _sweep_facts(source([ctfio.CTFDeserializer(xs, X), ctfio.CTFDeserializer(ys, Y)],
                                 randomize=False))
    assert len(set(joined)) == 1
    assert joined[0] == sum(max(len(xs_), len(ys_)) for k, xs_, ys_ in seqs if k % 7)


def test_composite_torch_and_training_session(composite):
    torch = pytest.importorskip("torch")
    import ctfio.torch as ct
    _, xs, ys, _ = composite
    both = composite[0]

    def mk(joined):
        return lambda: (source([ctfio.CTFDeserializer(xs, X), ctfio.CTFDeserializer(ys, Y)],
                               chunk_size_in_bytes=1) if joined else
                        source(ctfio.CTFDeserializer(both, XY), chunk_size_in_bytes=1))

    def batches(joined):
        out = []
        for i, b in enumerate(ct.CTFIterableDataset(mk(joined), 8, with_keys=True)):
            out.append({k: (v.to_dense() if v.layout == torch.sparse_csr else v).tolist()
                        for k, v in b.items()})
            if i == 10:
                break
        return out

    assert batches(True) == batches(False)

    def session(joined):
        seen = []
        training_session(mk(joined)(), lambda data, info: seen.append(
            sorted((si.name, data[si].keys.tolist()) for si in data)), mb_size=8,
            max_samples=200, epoch_size=INFINITELY_REPEAT, progress=False).train()
        return seen

    assert session(True) == session(False)


CHILD = r"""
import os, resource, sys, ctfio
pattern = sys.argv[1]
src = ctfio.MinibatchSource(ctfio.CTFDeserializer(pattern, dict(x=ctfio.StreamDef(shape=100))),
                            randomization_window_in_chunks=2, chunk_size_in_bytes=1 << 18,
                            max_sweeps=1, num_threads=1, prefetch_chunks=1)
n = src.next_minibatch(1)[src.streams.x].num_sequences
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
while True:
    mb = src.next_minibatch(64)
    if not mb:
        break
    n += mb[src.streams.x].num_sequences
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
st = src.stats()
print(n, before, after, st["chunks_resident_peak"], st["bytes_resident_peak"])
"""


def test_corpus_memory_is_bounded_by_the_window(tmp_path):
    """60 MB over 30 files, a window of two 256 KiB chunks: reading it all must not grow the
    child's peak RSS by anything near the data size (index and window only)."""
    d = tmp_path / "big"
    d.mkdir()
    row = " |x " + " ".join(["0.5"] * 100) + "\n"
    per_file = 2 * 1024 * 1024 // (len(row) + 6)
    for f in range(30):
        with open(d / ("f%02d.ctf" % f), "w") as out:
            out.write("".join("%d%s" % (i, row) for i in range(per_file)))
    total = sum(os.path.getsize(d / p) for p in os.listdir(d))
    r = subprocess.run([sys.executable, "-c", CHILD, str(d / "f*.ctf")], capture_output=True,
                       text=True, check=True)
    n, before, after, chunks_peak, bytes_peak = map(int, r.stdout.split())
    assert n == 30 * per_file
    grew = (after - before) * 1024  # ru_maxrss is in KiB
    assert grew < total // 4, (grew, total)
    print("peak RSS grew by %d KiB reading %d KiB" % (grew // 1024, total // 1024))
    assert chunks_peak <= 2 + 1 + 2
    assert bytes_peak < total // 20

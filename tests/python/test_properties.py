"""Determinism as properties (hypothesis): random CTF files (dense and sparse streams, sequence
lengths, ids or line mode, a stream on only some lines of a sequence) read with random settings
(randomization window, chunk size, seed, frame mode, definesMBSize) and random schedules of
minibatch sizes, worker counts and checkpoint points:

* one sweep delivers a permutation of the file's sequences;
* the order does not depend on the minibatch sizes;
* the workers' shares of a step are disjoint and their union is the single-process minibatch;
* a restore from the state after any step continues identically;
* an elastic restore (another worker count) loses and repeats nothing.

The profile is fixed (derandomize=True, no example database), so every run tries the same
examples; max_examples keeps the module at well under a minute.
"""
import os
import random
import tempfile
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import ctfio  # noqa: E402

settings.register_profile("ctfio", derandomize=True, database=None, deadline=None,
                          print_blob=False,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large])
PROFILE = settings.get_profile("ctfio")


def bounded(n):
    return settings(PROFILE, max_examples=n)


# ---------------------------------------------------------------------------------------------
# Random files and settings
# ---------------------------------------------------------------------------------------------

def _num(rnd):
    return rnd.choice(["%d" % rnd.randint(-9, 9), "%.3g" % rnd.uniform(-100, 100),
                       "%.17g" % rnd.gauss(0, 1e6)])


@st.composite
def cases(draw):
    line_mode = draw(st.booleans())
    n = draw(st.integers(1, 40))
    da, db = draw(st.integers(1, 3)), draw(st.integers(1, 8))
    single = line_mode or draw(st.integers(0, 3)) == 0     # every sequence one line long
    lengths = [1] * n if single else draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    ids = sorted(draw(st.lists(st.integers(0, 10 ** 9), min_size=n, max_size=n, unique=True)))
    if draw(st.booleans()):
        rnd_ids = random.Random(draw(st.integers(0, 2 ** 31)))
        rnd_ids.shuffle(ids)                                 # ids need not increase
    rnd = random.Random(draw(st.integers(0, 2 ** 31)))
    lines = []
    for i, length in enumerate(lengths):
        b_lines = rnd.randint(1, length)                     # b on the first lines only
        for t in range(length):
            text = "" if line_mode else "%d\t" % ids[i]
            text += "|a " + " ".join(_num(rnd) for _ in range(da))
            if t < b_lines:
                idx = sorted(rnd.sample(range(db), rnd.randint(0, min(3, db))))
                text += " |b" + "".join(" %d:%s" % (j, _num(rnd)) for j in idx)
            lines.append(text)
    return dict(
        text="\n".join(lines) + "\n", n=n, da=da, db=db, line_mode=line_mode,
        keys=list(range(n)) if line_mode else None, ids=None if line_mode else ids,
        randomize=draw(st.integers(0, 3)) > 0,
        seed=draw(st.integers(0, 2 ** 32 - 1)),
        window=draw(st.integers(1, 5)),
        chunk=draw(st.sampled_from([64, 128, 256, 1024, 1 << 20])),
        frame=single and draw(st.booleans()),
        defines=draw(st.sampled_from([None, "a", "b"])),
        sizes=draw(st.lists(st.integers(1, 12), min_size=1, max_size=4)),
        sizes2=draw(st.lists(st.integers(1, 12), min_size=1, max_size=4)),
    )


class Data:
    """The case's file on disk (a temporary folder per example)."""

    def __init__(self, case):
        self.case = case
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "d.ctf")
        with open(self.path, "w") as f:
            f.write(case["text"])

    def source(self, max_sweeps=1, randomize=None, **kw):
        c = self.case
        defs = ctfio.StreamDefs(
            a=ctfio.StreamDef(shape=c["da"], defines_mb_size=c["defines"] == "a"),
            b=ctfio.StreamDef(shape=c["db"], is_sparse=True, defines_mb_size=c["defines"] == "b"))
        return ctfio.MinibatchSource(
            ctfio.CTFDeserializer(self.path, defs, precision="double"),
            randomize=c["randomize"] if randomize is None else randomize,
            randomization_seed=c["seed"], randomization_window_in_chunks=c["window"],
            chunk_size_in_bytes=c["chunk"], frame_mode=c["frame"], max_sweeps=max_sweeps,
            num_threads=1, **kw)

    def close(self):
        self.dir.cleanup()


def sequences(mb):
    """A minibatch as a list of hashable sequences: (key, a's bytes, b's CSR bytes)."""
    if not mb:
        return []
    by = {si.name: md for si, md in mb.items()}
    keys = by["a"].keys
    a, b = by["a"].as_sequences(), by["b"].as_sequences()
    out = []
    for i in range(len(keys)):
        x = np.ascontiguousarray(a[i])
        m = sp.csr_matrix(b[i])
        out.append((int(keys[i]), x.shape, x.tobytes(), m.shape, m.indptr.tobytes(),
                    m.indices.tobytes(), m.data.tobytes()))
    return out


def run(src, sizes, steps=None, workers=1, rank=0):
    """Per-step sequences until the end of the data (or `steps` steps)."""
    out = []
    while steps is None or len(out) < steps:
        mb = src.next_minibatch(sizes[len(out) % len(sizes)], number_of_workers=workers,
                                worker_rank=rank)
        if not mb:
            break
        out.append(sequences(mb))
    return out


def flat(steps):
    return [s for step in steps for s in step]


def file_sequences(data):
    steps = run(data.source(randomize=False), [10 ** 9])
    got = flat(steps)
    c = data.case
    assert [s[0] for s in got] == (c["keys"] if c["line_mode"] else c["ids"])
    return got


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------

@bounded(150)
@given(cases())
def test_sweep_is_a_permutation_whatever_the_minibatch_sizes(case):
    data = Data(case)
    try:
        whole = file_sequences(data)
        one = flat(run(data.source(), case["sizes"]))
        other = flat(run(data.source(), case["sizes2"]))
        assert Counter(one) == Counter(whole) and len(one) == case["n"]
        assert one == other                      # the order is the timeline's, not the sizes'
    finally:
        data.close()


@bounded(80)
@given(cases(), st.integers(2, 4))
def test_workers_union_is_the_global_minibatch(case, workers):
    data = Data(case)
    try:
        glob = run(data.source(), case["sizes"])
        shares = [run(data.source(), case["sizes"], workers=workers, rank=r)
                  for r in range(workers)]
        assert all(len(s) == len(glob) for s in shares)   # all ranks end at the same step
        for t, step in enumerate(glob):
            parts = [s[t] for s in shares]
            union = [x for p in parts for x in p]
            assert Counter(union) == Counter(step) and len(union) == len(step)
            for p in parts:                                # each share keeps the global order
                assert [x for x in step if x in set(p)] == p
    finally:
        data.close()


@bounded(80)
@given(cases(), st.integers(1, 2), st.integers(0, 10 ** 6))
def test_restore_anywhere_continues_identically(case, sweeps, at):
    data = Data(case)
    try:
        src = data.source(max_sweeps=sweeps)
        steps, states = [], [src.get_checkpoint_state()]
        while True:
            got = run(src, case["sizes"][len(steps) % len(case["sizes"]):] +
                      case["sizes"][:len(steps) % len(case["sizes"])], steps=1)
            if not got:
                break
            steps.append(got[0])
            states.append(src.get_checkpoint_state())
        j = at % (len(steps) + 1)
        again = data.source(max_sweeps=sweeps)
        again.restore_from_checkpoint(states[j])
        rest = []
        while True:
            k = len(steps[:j]) + len(rest)
            got = run(again, [case["sizes"][k % len(case["sizes"])]], steps=1)
            if not got:
                break
            rest.append(got[0])
        assert rest == steps[j:]
    finally:
        data.close()


@bounded(80)
@given(cases(), st.integers(1, 3), st.integers(1, 4), st.integers(0, 10 ** 6))
def test_elastic_restore_loses_and_repeats_nothing(case, before, after, at):
    data = Data(case)
    try:
        whole = file_sequences(data)
        total = len(run(data.source(), case["sizes"]))
        j = at % (total + 1)
        srcs = [data.source() for _ in range(before)]
        prefix, states = [], []
        for r, s in enumerate(srcs):
            prefix += flat(run(s, case["sizes"], steps=j, workers=before, rank=r))
            states.append(s.get_checkpoint_state())
        assert all(st_ == states[0] for st_ in states)    # the same state on every rank
        rest = []
        for r in range(after):
            s = data.source()
            s.restore_from_checkpoint(states[0])
            rest += flat(run(s, case["sizes2"], workers=after, rank=r))
        assert Counter(prefix + rest) == Counter(whole) and len(prefix + rest) == len(whole)
    finally:
        data.close()

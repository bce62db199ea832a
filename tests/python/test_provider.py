"""PaddlePaddle-style providers (rules 12): the @provider decorator and its parameters,
the input-type layouts of PaddlePaddle's table, pools, batching, cache, checks, init_hook, threads
and lazy files, seeded reproducibility, the UserMinibatchSource view, double buffering (CPU path)
and the C record encoder/packer."""

import gc
import logging
import os
import pathlib
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest

import ctfio
from ctfio import _ctfio
from ctfio.provider import (
    Batch,
    CacheType,
    DataProvider,
    InputType,
    ProviderData,
    SampleError,
    SequenceType,
    Settings,
    dense_vector,
    dense_vector_sequence,
    dense_vector_sub_sequence,
    index_slot,
    integer_sequence,
    integer_value,
    integer_value_sequence,
    integer_value_sub_sequence,
    provider,
    sparse_binary_vector,
    sparse_binary_vector_sequence,
    sparse_binary_vector_sub_sequence,
    sparse_vector,
    sparse_vector_sequence,
    sparse_vector_sub_sequence,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

def id_provider(n_per_file, **opts):
    """Files are named 'f<k>'; file k yields samples [k * 1000 + i] as integer ids (no I/O)."""
    opts.setdefault("input_types", {"id": integer_value(10**6)})

    @provider(**opts)
    def process(settings, filename):
        k = int(os.path.basename(filename)[1:])
        for i in range(n_per_file(k) if callable(n_per_file) else n_per_file):
            yield [k * 1000 + i]

    return process


def files(n):
    return ["f%d" % k for k in range(n)]


def ids_of(batches, name="id"):
    return [int(x) for b in batches for x in b[name].ids]


def one_pass(dp):
    return list(dp)


# ---------------------------------------------------------------------------------------------
# module surface
# ---------------------------------------------------------------------------------------------

def test_module_is_callable_decorator_and_paddle_alias():
    import ctfio.paddle as paddle
    assert callable(ctfio.provider)
    assert ctfio.provider.CacheType is CacheType
    assert paddle.provider is provider and paddle.CacheType is CacheType
    assert ctfio.DataProvider is DataProvider and ctfio.dense_vector is dense_vector
    ns = {}
    exec("from ctfio.paddle import *", ns)
    for name in ("provider", "CacheType", "SequenceType", "dense_vector", "sparse_binary_vector",
                 "sparse_vector", "integer_value", "integer_value_sequence",
                 "sparse_vector_sub_sequence", "integer_sequence", "DataProvider"):
        assert name in ns, name

    @ctfio.provider(input_types=[dense_vector(2)])
    def process(settings, filename):
        yield [[1.0, 2.0]]

    assert issubclass(process, DataProvider) and issubclass(process, ctfio.UserMinibatchSource)
    assert process.__name__ == "process" and process.__module__ == __name__
    assert list(process.generator(None, "x")) == [[[1.0, 2.0]]]


def test_import_ctfio_does_not_import_numpy():
    code = "import sys, ctfio, ctfio.paddle; print('numpy' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_input_types_and_sequence_shorthands():
    S = SequenceType
    cases = {
        dense_vector(3): (0, S.NO_SEQUENCE), dense_vector_sequence(3): (0, S.SEQUENCE),
        dense_vector_sub_sequence(3): (0, S.SUB_SEQUENCE),
        sparse_binary_vector(3): (1, S.NO_SEQUENCE),
        sparse_binary_vector_sequence(3): (1, S.SEQUENCE),
        sparse_binary_vector_sub_sequence(3): (1, S.SUB_SEQUENCE),
        sparse_vector(3): (2, S.NO_SEQUENCE), sparse_vector_sequence(3): (2, S.SEQUENCE),
        sparse_vector_sub_sequence(3): (2, S.SUB_SEQUENCE),
        integer_value(3): (3, S.NO_SEQUENCE), integer_value_sequence(3): (3, S.SEQUENCE),
        integer_value_sub_sequence(3): (3, S.SUB_SEQUENCE), integer_sequence(3): (3, S.SEQUENCE),
        index_slot(3, S.SEQUENCE): (3, S.SEQUENCE),
        integer_value(3, seq_type=S.SUB_SEQUENCE): (3, S.SUB_SEQUENCE),
    }
    for t, (kind, seq) in cases.items():
        assert (t.type, t.seq_type, t.dim) == (kind, seq, 3)
    assert repr(sparse_vector_sub_sequence(7)) == "sparse_vector_sub_sequence(7)"
    with pytest.raises(ValueError, match="dim"):
        dense_vector(0)
    with pytest.raises(ValueError, match="seq_type"):
        dense_vector(3, seq_type=5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(pool_size=0), "pool_size"),
    (dict(min_pool_size=-2), "min_pool_size"),
    (dict(pool_size=10, min_pool_size=11), "min_pool_size: must be <= pool_size"),
    (dict(cache=7), "cache"),
    (dict(check=1), "check"),
    (dict(input_types=[3]), "input_types"),
    (dict(input_types="dense"), "input_types"),
])
def test_decorator_validates_its_parameters(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        provider(**kwargs)


def test_decorator_rejects_unknown_parameters_and_callables():
    with pytest.raises(TypeError):
        provider(input_types=[dense_vector(2)], poolsize=3)
    with pytest.raises(TypeError, match="calc_batch_size"):
        provider(input_types=[dense_vector(2)], calc_batch_size=3)
    with pytest.raises(TypeError, match="decorated"):
        DataProvider(["a"], lambda s, f: iter(()))


# ---------------------------------------------------------------------------------------------
# layouts: every input type x sequence kind of PaddlePaddle's table
# ---------------------------------------------------------------------------------------------

def _rand_step(rng, kind, dim):
    if kind == 0:
        return [float(x) for x in rng.standard_normal(dim).astype(np.float32)]
    if kind == 1:
        return sorted(int(i) for i in rng.choice(dim, rng.integers(0, dim + 1), replace=False))
    if kind == 2:
        idx = rng.choice(dim, rng.integers(0, dim + 1), replace=False)
        return [(int(i), float(np.float32(rng.standard_normal()))) for i in idx]
    return int(rng.integers(0, dim))


def _rand_value(rng, kind, seq, dim):
    if seq == 0:
        return _rand_step(rng, kind, dim)
    if seq == 1:
        return [_rand_step(rng, kind, dim) for _ in range(rng.integers(1, 4))]
    return [[_rand_step(rng, kind, dim) for _ in range(rng.integers(1, 3))]
            for _ in range(rng.integers(1, 3))]


def _reference(values, kind, seq, dim):
    """Independent model of PaddlePaddle's layouts: flatten to time steps, then build the arrays."""
    steps, seq_starts, sub_starts = [], [], []
    for v in values:
        seq_starts.append(len(steps))
        if seq == 0:
            steps.append(v)
        elif seq == 1:
            steps.extend(v)
        else:
            for sub in v:
                sub_starts.append(len(steps))
                steps.extend(sub)
    seq_starts.append(len(steps))
    sub_starts.append(len(steps))
    out = {}
    if kind == 0:
        out["value"] = np.asarray(steps, np.float32).reshape(len(steps), dim)
    elif kind == 3:
        out["value"] = np.asarray(steps, np.int64)
    else:
        dense = np.zeros((len(steps), dim), np.float32)
        for r, s in enumerate(steps):
            for e in s:
                i, x = (e, 1.0) if kind == 1 else e
                dense[r, i] = x
        out["dense"] = dense
    out["seq_starts"] = np.asarray(seq_starts) if seq >= 1 else None
    out["sub_seq_starts"] = np.asarray(sub_starts) if seq == 2 else None
    out["steps"] = len(steps)
    return out


@pytest.mark.parametrize("seq", [0, 1, 2], ids=["NO_SEQUENCE", "SEQUENCE", "SUB_SEQUENCE"])
@pytest.mark.parametrize("kind", [0, 1, 2, 3], ids=["dense", "sparse_binary", "sparse", "int"])
def test_layouts(kind, seq):
    rng = np.random.default_rng(kind * 3 + seq)
    dim = 5
    t = InputType(dim, seq, kind)
    values = [_rand_value(rng, kind, seq, dim) for _ in range(7)]

    @provider(input_types={"x": t, "tag": integer_value(100)}, check=True)
    def process(settings, filename):
        for i, v in enumerate(values):
            yield [v, i]

    b = next(iter(process(["only"], batch_size=7, is_train=False)))
    d, ref = b["x"], _reference(values, kind, seq, dim)
    assert isinstance(b, Batch) and b[0] is d and b.num_samples == 7
    assert isinstance(d, ProviderData) and d.input_type == t
    assert list(b["tag"].ids) == list(range(7))
    assert d.num_sequences == 7 and d.num_samples == ref["steps"]
    if kind in (0, 3):
        assert d.value.dtype == (np.float32 if kind == 0 else np.int64)
        np.testing.assert_array_equal(d.value, ref["value"])
        assert d.indptr is None and d.indices is None
    else:
        assert d.is_sparse and d.indptr.dtype == np.int64 and d.indices.dtype == np.int32
        assert len(d.indptr) == ref["steps"] + 1
        np.testing.assert_array_equal(d.csr().toarray(), ref["dense"])
        np.testing.assert_array_equal(d.value, d.values)
    for key in ("seq_starts", "sub_seq_starts"):
        if ref[key] is None:
            assert getattr(d, key) is None
        else:
            np.testing.assert_array_equal(getattr(d, key), ref[key])
            assert getattr(d, key).dtype == np.int64
    # the MinibatchData view agrees: one sequence per sample, lengths in time steps
    lengths = np.diff(ref["seq_starts"]) if seq else np.ones(7)
    np.testing.assert_array_equal(d.lengths, lengths)
    assert len(d.as_sequences()) == 7


def test_dense_float64_and_sparse_binary_values_are_ones():
    @provider(input_types=[dense_vector(2), sparse_binary_vector(4)])
    def process(settings, filename):
        yield [[0.1, 0.2], [3, 1]]

    b = next(iter(process(["a"], batch_size=1, dtype="float64")))
    assert b[0].value.dtype == np.float64 and b[0].value[0, 0] == 0.1
    assert b[1].value.dtype == np.float64
    np.testing.assert_array_equal(b[1].value, [1.0, 1.0])
    np.testing.assert_array_equal(b[1].indices, [3, 1])  # file order kept


def test_dict_and_list_samples_give_the_same_batches():
    types = {"a": dense_vector_sequence(3), "b": sparse_vector(6), "c": integer_value(9)}
    rng = np.random.default_rng(3)
    samples = [[_rand_value(rng, 0, 1, 3), _rand_value(rng, 2, 0, 6), _rand_value(rng, 3, 0, 9)]
               for _ in range(20)]

    @provider(input_types=types)
    def as_list(settings, filename):
        yield from samples

    @provider(input_types=types)
    def as_dict(settings, filename):
        for s in samples:
            yield dict(zip("cba", reversed(s)))  # key order does not matter

    x = one_pass(as_list(["f"], batch_size=6, seed=4))
    y = one_pass(as_dict(["f"], batch_size=6, seed=4))
    assert len(x) == len(y) == 4
    for bx, by in zip(x, y):
        for name in types:
            np.testing.assert_array_equal(bx[name].value, by[name].value)


def test_numpy_samples_take_the_buffer_fast_path_with_the_same_result():
    rng = np.random.default_rng(5)
    pixels = rng.integers(0, 256, (10, 6)).astype(np.uint8)
    seqs = [rng.standard_normal((int(n), 3)) for n in rng.integers(1, 4, 10)]

    def make(as_numpy):
        @provider(input_types=[dense_vector(6), dense_vector_sequence(3),
                               dense_vector_sub_sequence(3)])
        def process(settings, filename):
            for p, s in zip(pixels, seqs):
                if as_numpy:
                    yield [p, s, [s, s[:1]]]
                else:
                    yield [[float(v) for v in p], s.tolist(), [s.tolist(), s[:1].tolist()]]
        return process

    a = next(iter(make(True)(["f"], batch_size=10, is_train=False)))
    b = next(iter(make(False)(["f"], batch_size=10, is_train=False)))
    for i in range(3):
        np.testing.assert_array_equal(a[i].value, b[i].value)
    np.testing.assert_array_equal(a[0].value, pixels.astype(np.float32))


# ---------------------------------------------------------------------------------------------
# file lists
# ---------------------------------------------------------------------------------------------

def test_file_list_file_and_list_of_paths(tmp_path):
    seen = []

    @provider(input_types=[integer_value(10)])
    def process(settings, filename):
        seen.append(filename)
        yield [1]

    lst = tmp_path / "train.list"
    lst.write_text("a.txt\n\n  b.txt  \nsub/c.txt\n")
    dp = process(str(lst), batch_size=4, is_train=False)
    assert dp.file_list == ["a.txt", "b.txt", "sub/c.txt"]
    one_pass(dp)
    assert seen == ["a.txt", "b.txt", "sub/c.txt"]  # passed unchanged, in order
    assert process(lst, batch_size=1).file_list == dp.file_list  # a PathLike works too
    assert process([tmp_path / "x"], batch_size=1).file_list == [str(tmp_path / "x")]
    empty = tmp_path / "empty.list"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no file"):
        process(str(empty), batch_size=1)
    with pytest.raises(TypeError, match="file_list"):
        process(42, batch_size=1)


# ---------------------------------------------------------------------------------------------
# shuffling and reproducibility
# ---------------------------------------------------------------------------------------------

def test_should_shuffle_default_follows_is_train():
    p = id_provider(30)
    test_order = ids_of(one_pass(p(files(4), batch_size=7, is_train=False)))
    assert test_order == [k * 1000 + i for k in range(4) for i in range(30)]  # file order
    train = ids_of(one_pass(p(files(4), batch_size=7, is_train=True)))
    assert train != test_order and sorted(train) == test_order
    forced_off = id_provider(30, should_shuffle=False)(files(4), batch_size=7, is_train=True)
    assert ids_of(one_pass(forced_off)) == test_order
    forced_on = id_provider(30, should_shuffle=True)(files(4), batch_size=7, is_train=False)
    assert sorted(ids_of(one_pass(forced_on))) == test_order
    assert ids_of(one_pass(id_provider(30, should_shuffle=True)(
        files(4), batch_size=7, is_train=False))) != test_order


def test_shuffling_is_seeded_and_independent_of_threads_and_readahead():
    p = id_provider(lambda k: 5 + 3 * k, pool_size=40, min_pool_size=20)

    def run(**kw):
        dp = p(files(9), batch_size=8, seed=kw.pop("seed", 0), **kw)
        return [ids_of(one_pass(dp)) for _ in range(3)]  # three passes

    base = run()
    assert run() == base
    assert run(num_threads=1, readahead=1) == base
    assert run(num_threads=7, readahead=3) == base
    assert run(seed=1) != base
    assert run(open_files=2) != base  # the file window is part of the order, as in PaddlePaddle
    assert base[0] != base[1] != base[2]  # every pass has its own order
    assert all(sorted(x) == sorted(base[0]) for x in base)


def test_reading_threads_interleave_files_when_shuffling():
    dp = id_provider(50, min_pool_size=10, pool_size=10)(files(4), batch_size=10, seed=2)
    first = ids_of(one_pass(dp))[:40]
    assert len({x // 1000 for x in first}) > 1  # samples of several files mix early


# ---------------------------------------------------------------------------------------------
# pool bounds
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pool, low", [(10, 10), (25, 5), (16, -1), (12, 0)])
def test_pool_never_exceeds_pool_size_and_draws_only_loaded_samples(pool, low):
    dp = id_provider(200, pool_size=pool, min_pool_size=low)(["f0"], batch_size=4, seed=1,
                                                            open_files=1)
    out = ids_of(one_pass(dp))
    assert sorted(out) == list(range(200))
    st = dp.stats()
    assert st["pool_peak_units"] <= pool and st["pool_peak_samples"] <= pool
    # the pool holds at least min_pool_size (the shuffle granularity) when a sample is drawn; a
    # fill tops it up by up to a chunk (31 more); min_pool_size=-1 fills it completely
    held = pool if low == -1 else min(pool, max(low, 1) + 31)
    assert st["pool_peak_units"] == held
    # one file in file order: sample j enters the pool only after j - held samples left it
    assert all(x < i + held for i, x in enumerate(out))
    assert max(x - i for i, x in enumerate(out)) >= held // 2  # and it does draw far ahead


def test_min_pool_size_minus_one_loads_the_whole_pass_when_unbounded():
    dp = id_provider(60, pool_size=-1, min_pool_size=-1)(files(3), batch_size=5, seed=0)
    out = ids_of(one_pass(dp))
    assert dp.stats()["pool_peak_units"] == 180
    assert len(out) == 180


def test_pool_bound_counts_calc_batch_size_units():
    sizes = {i: 1 + i % 4 for i in range(100)}

    @provider(input_types=[integer_value(100)], pool_size=12, min_pool_size=12,
              calc_batch_size=lambda s: sizes[s[0]])
    def process(settings, filename):
        for i in range(100):
            yield [i]

    dp = process(["f"], batch_size=6, seed=3)
    out = ids_of(one_pass(dp), "input0")
    assert sorted(out) == list(range(100))
    assert dp.stats()["pool_peak_units"] <= 12


def test_not_shuffling_keeps_the_pool_small():
    dp = id_provider(100)(files(2), batch_size=10, is_train=False)
    one_pass(dp)
    assert dp.stats()["pool_peak_units"] <= 32  # a FIFO of one chunk: min_pool_size is moot
    dp = id_provider(100, pool_size=8)(files(2), batch_size=8, is_train=False)
    assert ids_of(one_pass(dp)) == [k * 1000 + i for k in range(2) for i in range(100)]
    assert dp.stats()["pool_peak_units"] <= 8


def test_batch_size_larger_than_pool_size_is_rejected_at_creation():
    p = id_provider(10, pool_size=8)
    with pytest.raises(ValueError, match="batch_size: must be <= pool_size"):
        p(files(1), batch_size=9)
    dp = p(files(1), batch_size=8)
    with pytest.raises(ValueError, match="num_samples: must be <= pool_size"):
        dp.next_minibatch(9)
    with pytest.raises(ValueError, match="batch_size: must be <= pool_size"):
        next(dp.batches(batch_size=100))


# ---------------------------------------------------------------------------------------------
# batch composition
# ---------------------------------------------------------------------------------------------

def _cut_reference(units, size, over):
    """Sequential model of batching in file order (no shuffle)."""
    batches, cur, total = [], [], 0
    i = 0
    while i < len(units):
        u = units[i]
        if cur and total + u > size:
            if over:
                cur.append(i)
                i += 1
            batches.append(cur)
            cur, total = [], 0
            continue
        cur.append(i)
        total += u
        i += 1
        if total >= size:
            batches.append(cur)
            cur, total = [], 0
    if cur:
        batches.append(cur)
    return batches


@pytest.mark.parametrize("over", [True, False])
def test_calc_batch_size_and_can_over_batch_size(over):
    lengths = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3]

    @provider(input_types={"w": integer_value_sequence(100)}, calc_batch_size=len if False
              else (lambda s: len(s["w"])), can_over_batch_size=over)
    def process(settings, filename):
        for n in lengths:
            yield {"w": list(range(n))}

    batches = one_pass(process(["f"], batch_size=10, is_train=False))
    got = [[int(x) for x in np.diff(b["w"].seq_starts)] for b in batches]
    want = [[lengths[i] for i in b] for b in _cut_reference(lengths, 10, over)]
    assert got == want
    assert [b.size for b in batches] == [sum(b) for b in want]
    for b in want:
        if not over and len(b) > 1:
            assert sum(b) <= 10
    # the oversize samples (> 10 units) never occur here; see the next test


def test_oversize_sample_is_delivered_alone_and_never_hangs():
    lengths = [2, 30, 2, 2, 50, 1]

    @provider(input_types=[integer_value_sequence(100)], calc_batch_size=lambda s: len(s[0]),
              can_over_batch_size=False, pool_size=20, min_pool_size=20)
    def process(settings, filename):
        for n in lengths:
            yield [list(range(n))]

    dp = process(["f"], batch_size=8, is_train=False)
    got = [[int(x) for x in np.diff(b[0].seq_starts)] for b in one_pass(dp)]
    assert got == [[2], [30], [2, 2], [50], [1]]
    assert [g for g in got if sum(g) > 8] == [[30], [50]]
    dp2 = process(["f"], batch_size=8, is_train=True, seed=5)  # shuffled: same guarantees
    got2 = [[int(x) for x in np.diff(b[0].seq_starts)] for b in one_pass(dp2)]
    assert sorted(sum(got2, [])) == sorted(lengths)
    assert all(len(g) == 1 for g in got2 if sum(g) > 8)


# ---------------------------------------------------------------------------------------------
# cache
# ---------------------------------------------------------------------------------------------

def _counting_provider(cache, calls, n=12):
    @provider(input_types={"id": integer_value(10**6)}, cache=cache, pool_size=30,
              min_pool_size=15)
    def process(settings, filename):
        calls.append(filename)
        k = int(filename[1:])
        for i in range(n):
            yield [k * 1000 + i]

    return process


def test_cache_pass_in_mem_replays_without_calling_the_generator():
    calls = []
    dp = _counting_provider(CacheType.CACHE_PASS_IN_MEM, calls)(files(5), batch_size=7, seed=9)
    plain = _counting_provider(CacheType.NO_CACHE, [])(files(5), batch_size=7, seed=9)
    for _pass_index in range(3):
        got, want = ids_of(one_pass(dp)), ids_of(one_pass(plain))
        assert got == want  # the cache changes nothing in the order
        assert sorted(calls) == files(5)  # only the first pass called the generator
    st = dp.stats()
    assert st["cache_files"] == 5 and st["cache_samples"] == 60


def test_cache_stays_correct_after_an_interrupted_pass():
    calls = []
    dp = _counting_provider(CacheType.CACHE_PASS_IN_MEM, calls, n=40)(files(6), batch_size=5,
                                                                      seed=1, open_files=2,
                                                                      readahead=4)
    it = iter(dp)
    next(it)  # pass 0 is abandoned after one batch
    first_calls = len(calls)
    assert first_calls < 6
    full = ids_of(one_pass(dp))  # pass 1: complete, every sample exactly once
    assert sorted(full) == sorted(k * 1000 + i for k in range(6) for i in range(40))
    assert len(calls) <= first_calls + 6 and set(calls) == set(files(6))
    n = len(calls)
    again = ids_of(one_pass(dp))
    assert len(calls) == n and sorted(again) == sorted(full)  # pass 2: all from memory
    with pytest.raises(RuntimeError, match="ended by a newer pass"):
        next(it)


# ---------------------------------------------------------------------------------------------
# check / check_fail_continue
# ---------------------------------------------------------------------------------------------

BAD_SAMPLES = [
    ({"x": [1.0, 2.0], "y": 1, "s": [[0]]}, "expected 3 values"),
    ({"x": [1.0, 2.0, 3.0], "y": 10, "s": [[0]]}, "value 10 out of range"),
    ({"x": [1.0, 2.0, 3.0], "y": -1, "s": [[0]]}, "out of range"),
    ({"x": [1.0, 2.0, 3.0], "y": 1, "s": [[4]]}, "index 4 out of range"),
    ({"x": [1.0, 2.0, 3.0], "y": 1, "s": []}, "empty sequence"),
    ({"x": [1.0, 2.0, 3.0], "y": 1, "s": [0]}, "expected a list of indices"),
    ({"x": [1.0, 2.0, 3.0], "y": 1.5, "s": [[0]]}, "must be an int"),
    ({"x": [1.0, "a", 3.0], "y": 1, "s": [[0]]}, "expected a number"),
    ({"x": [1.0, 2.0, 3.0], "s": [[0]]}, "has 2 inputs"),
    ({"x": [1.0, 2.0, 3.0], "y": 1, "s": [[0]], "z": 3}, "has 4 inputs"),
    (42, "must be a list or tuple"),
]
TYPES = {"x": dense_vector(3), "y": integer_value(10), "s": sparse_binary_vector_sequence(4)}
GOOD = {"x": [1.0, 2.0, 3.0], "y": 1, "s": [[0, 3]]}


@pytest.mark.parametrize("bad, message", BAD_SAMPLES)
def test_check_raises_with_file_and_sample_number(bad, message):
    @provider(input_types=TYPES, check=True)
    def process(settings, filename):
        yield GOOD
        yield GOOD
        yield bad

    with pytest.raises(SampleError, match=message) as info:
        one_pass(process(["data.txt"], batch_size=1, is_train=False))
    assert info.value.path == "data.txt" and info.value.sample == 2
    assert str(info.value).startswith("data.txt: sample 2: ")
    assert isinstance(info.value, ValueError)


def test_check_fail_continue_drops_counts_and_reports(caplog):
    bads = [b for b, _ in BAD_SAMPLES]

    @provider(input_types=TYPES, check=True, check_fail_continue=True)
    def process(settings, filename):
        for i, bad in enumerate(bads):
            yield dict(GOOD, y=i % 10)
            yield bad

    with caplog.at_level(logging.WARNING, logger="ctfio.provider"):
        dp = process(["d.txt"], batch_size=4, is_train=False)
        got = [int(y) for b in dp for y in b["y"].ids]
    assert got == [i % 10 for i in range(len(bads))]  # every good sample, in order
    st = dp.stats()
    assert st["samples_dropped"] == len(bads) and st["samples_read"] == 2 * len(bads)
    assert st["drops"][0][:2] == ("d.txt", 1) and "expected 3 values" in st["drops"][0][2]
    assert len([r for r in caplog.records if "dropped" in r.getMessage()]) == 10  # first 10


def test_calc_batch_size_must_return_a_count():
    @provider(input_types=[integer_value(10)], calc_batch_size=lambda s: "big")
    def process(settings, filename):
        yield [1]

    with pytest.raises(SampleError, match="sample 0: calc_batch_size must return an int"):
        one_pass(process(["f"], batch_size=1))


def test_batches_with_another_size_and_iterating_needs_a_size():
    dp = id_provider(10)(files(2), is_train=False)
    with pytest.raises(ValueError, match="batch_size"):
        iter(dp)
    assert [b.num_samples for b in dp.batches(batch_size=6)] == [6, 6, 6, 2]
    assert [b.pass_index for b in dp.batches(batch_size=20)] == [1]


def test_without_check_ranges_pass_and_layout_errors_still_raise():
    @provider(input_types=TYPES)  # check=False (the default)
    def process(settings, filename):
        yield {"x": [1.0, 2.0, 3.0], "y": 12, "s": [[3]]}
        yield {"x": [1.0, 2.0], "y": 1, "s": [[0]]}

    it = iter(process(["f"], batch_size=1, is_train=False))
    b = next(it)
    assert int(b["y"].ids[0]) == 12 and int(b["s"].indices[0]) == 3
    with pytest.raises(SampleError, match="sample 1: .*expected 3 values"):
        next(it)
    # a sparse index outside [0, dim) is refused whatever check says: it would reach the arrays

    @provider(input_types=TYPES)
    def bad_index(settings, filename):
        yield {"x": [1.0, 2.0, 3.0], "y": 1, "s": [[7]]}

    with pytest.raises(SampleError, match="sample 0: .*index 7 out of range"):
        one_pass(bad_index(["f"], batch_size=1, is_train=False))


def test_check_fail_continue_without_check_has_no_effect():
    @provider(input_types=TYPES, check_fail_continue=True)
    def process(settings, filename):
        yield {"x": [1.0], "y": 1, "s": [[0]]}

    with pytest.raises(SampleError):
        one_pass(process(["f"], batch_size=1))


def test_generator_errors_surface_in_order_with_a_note():
    @provider(input_types=[integer_value(10)])
    def process(settings, filename):
        yield [1]
        yield [2]
        raise OSError("disk on fire")

    it = iter(process(["f"], batch_size=1, is_train=False))
    assert [int(next(it)[0].ids[0]) for _ in range(2)] == [1, 2]
    with pytest.raises(OSError, match="disk on fire") as info:
        next(it)
    if sys.version_info >= (3, 11):
        assert "while reading 'f' (after 2 samples)" in "".join(info.value.__notes__)


# ---------------------------------------------------------------------------------------------
# init_hook and settings
# ---------------------------------------------------------------------------------------------

def test_init_hook_arguments_and_settings_shared_with_process(tmp_path):
    hooks, seen = [], []

    def on_init(settings, file_list, is_train, dictionary, **kwargs):
        hooks.append((list(file_list), is_train, kwargs))
        settings.input_types = {"word": integer_value_sequence(len(dictionary)),
                                "label": integer_value(2)}
        settings.dictionary = dictionary
        assert isinstance(settings.logger, logging.Logger)

    @provider(init_hook=on_init)
    def process(settings, filename):
        seen.append(settings)
        yield {"word": [settings.dictionary[w] for w in ["a", "b", "a"]], "label": 1}

    words = {"a": 0, "b": 1}
    dp = process(["f1", "f2"], batch_size=2, is_train=False, args={"dictionary": words},
                 extra=5)
    assert hooks == [(["f1", "f2"], False, {"extra": 5})]
    b = next(iter(dp))
    np.testing.assert_array_equal(b["word"].ids, [0, 1, 0, 0, 1, 0])
    np.testing.assert_array_equal(b["word"].seq_starts, [0, 3, 6])
    assert all(s is dp.settings for s in seen) and isinstance(dp.settings, Settings)
    one_pass(dp)
    assert len(hooks) == 1  # once per provider, not per pass


def test_init_hook_may_change_options_and_missing_input_types_is_an_error():
    def on_init(settings, **kwargs):
        settings.input_types = [integer_value(10**6)]
        settings.pool_size = 5

    @provider(init_hook=on_init, min_pool_size=5)
    def process(settings, filename):
        yield from ([i] for i in range(50))

    dp = process(["f"], batch_size=5, seed=1)
    one_pass(dp)
    assert dp.options["pool_size"] == 5 and dp.stats()["pool_peak_units"] <= 5
    with pytest.raises(ValueError, match="batch_size: must be <= pool_size"):
        process(["f"], batch_size=6)

    @provider()
    def nothing(settings, filename):
        yield [1]

    with pytest.raises(ValueError, match="input_types: not set"):
        nothing(["f"], batch_size=1)


# ---------------------------------------------------------------------------------------------
# threads, lazy files, memory
# ---------------------------------------------------------------------------------------------

class _Context:
    """Stands for a generator's (possibly large) local state."""
    alive = 0
    peak = 0
    lock = threading.Lock()

    def __init__(self):
        with _Context.lock:
            _Context.alive += 1
            _Context.peak = max(_Context.peak, _Context.alive)

    def __del__(self):
        with _Context.lock:
            _Context.alive -= 1


def test_thousands_of_tiny_files_open_lazily_with_bounded_memory(tmp_path):
    opened = []

    @provider(input_types=[integer_value(10**6)], pool_size=64, min_pool_size=32)
    def process(settings, filename):
        ctx = _Context()  # noqa: F841 - held by the generator frame while it runs
        opened.append(filename)
        yield [int(filename[1:])]

    lst = tmp_path / "train.list"
    lst.write_text("".join("f%d\n" % k for k in range(3000)))
    _Context.alive = _Context.peak = 0
    dp = process(str(lst), batch_size=16, open_files=3, num_threads=2, seed=7)
    it = iter(dp)
    next(it)
    assert len(opened) < 200  # lazily: only what the pool and the read-ahead needed so far
    rest = ids_of(list(it), "input0")
    assert len(rest) == 3000 - 16 and len(opened) == 3000
    st = dp.stats()
    assert st["generators_alive_peak"] <= 3 and st["generators_alive"] == 0
    assert st["pool_peak_units"] <= 64
    assert _Context.peak <= 3  # finished generators are released at once
    gc.collect()
    assert _Context.alive == 0


def test_memory_does_not_grow_with_the_number_of_files():
    import tracemalloc

    @provider(input_types=[dense_vector(100)], pool_size=64, min_pool_size=32)
    def process(settings, filename):
        context = [0.0] * 100000  # a large generator context: 800 kB
        yield [context[:100]]

    def peak(n):
        gc.collect()
        tracemalloc.start()
        try:
            dp = process(files(n), batch_size=16, seed=1)
            base = tracemalloc.get_traced_memory()[0]
            assert sum(b.num_samples for b in dp) == n
            dp.close()
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()

    small, large = peak(300), peak(3000)
    assert large < 4e6  # a few contexts, the pool, the queues: not 3000 of anything big
    assert large - small < 1e6, (small, large)


def test_finished_generator_is_released_at_once():
    refs = []

    @provider(input_types=[integer_value(10)], should_shuffle=False)
    def process(settings, filename):
        ctx = _Context()
        refs.append(weakref.ref(ctx))
        yield [1]  # one sample: the documented problem case

    dp = process(files(3), batch_size=1, num_threads=1, open_files=1)
    it = iter(dp)
    next(it)
    next(it)
    assert refs[0]() is None  # file 0 was finished and dropped without a second random pick


def test_close_and_abandoned_pass_close_open_generators():
    closed = threading.Event()

    @provider(input_types=[integer_value(10)])
    def process(settings, filename):
        try:
            for i in range(10**6):
                yield [i % 10]
        finally:
            closed.set()

    dp = process(["big"], batch_size=4, is_train=False, readahead=8)
    next(iter(dp))
    threads = list(dp._readers.threads)
    dp.close()
    assert closed.wait(5)
    assert threads and not any(t.is_alive() for t in threads)
    closed.clear()
    assert int(next(iter(dp))[0].ids[0]) == 0  # usable again: a new pass, new threads
    dp.close()


def test_forgotten_provider_stops_its_threads():
    dp = id_provider(10**5)(files(2), batch_size=4)
    next(iter(dp))
    threads = list(dp._readers.threads)
    del dp
    gc.collect()
    for t in threads:
        t.join(5)
    assert threads and not any(t.is_alive() for t in threads)


# ---------------------------------------------------------------------------------------------
# UserMinibatchSource view, checkpoints, workers
# ---------------------------------------------------------------------------------------------

def test_next_minibatch_runs_passes_endlessly_with_end_of_sweep():
    dp = id_provider(5)(files(2), is_train=False)
    infos = dp.stream_infos()
    assert [(si.name, si.storage_format, si.dtype.name, si.shape) for si in infos] == [
        ("id", "dense", "int64", (10**6,))]
    seen, ends = [], []
    for _ in range(6):
        mb = dp.next_minibatch(4)
        (si, md), = mb.items()
        assert si is infos[0] and isinstance(md, ctfio.MinibatchData)
        seen.append([int(x) for x in md.ids])
        ends.append(md.end_of_sweep)
    assert seen == [[0, 1, 2, 3], [4, 1000, 1001, 1002], [1003, 1004],
                    [0, 1, 2, 3], [4, 1000, 1001, 1002], [1003, 1004]]
    assert ends == [False, False, True, False, False, True]


def test_next_minibatch_of_an_empty_pass_is_empty():
    @provider(input_types=[integer_value(3)])
    def process(settings, filename):
        return iter(())

    assert process(["a", "b"]).next_minibatch(3) == {}


def test_checkpoint_restore_continues_identically():
    p = id_provider(lambda k: 7 + k, pool_size=20, min_pool_size=10)

    def run(dp, n):
        return [[int(x) for x in next(iter(dp.next_minibatch(5).values())).ids]
                for _ in range(n)]

    whole = run(p(files(4), seed=3), 20)  # 34 samples a pass: 7 batches of 5, 5, ..., 4
    for k, where in ((5, (0, 25)), (7, (1, 0)), (9, (1, 10))):
        a = p(files(4), seed=3)
        head = run(a, k)
        state = a.get_checkpoint_state()
        assert state["version"] == 1 and (state["pass"], state["samples"]) == where
        b = p(files(4), seed=3)
        b.restore_from_checkpoint(dict(state))
        assert head + run(b, 20 - k) == whole
    with pytest.raises(ValueError, match="seed differs"):
        p(files(4), seed=4).restore_from_checkpoint(state)


def test_workers_share_out_the_files_of_each_pass():
    p = id_provider(6)
    out = []
    for r in range(3):
        dp = p(files(7), batch_size=4, seed=2, num_workers=3, worker_rank=r)
        out.append(ids_of(one_pass(dp)))
        with pytest.raises(ValueError, match="worker"):
            dp.next_minibatch(4, number_of_workers=1, worker_rank=0)
    flat = sorted(sum(out, []))
    assert flat == sorted(k * 1000 + i for k in range(7) for i in range(6))


def test_training_session_accepts_a_provider():
    dp = id_provider(10)(files(3), is_train=True, seed=0)
    got = []

    def step(data, info):
        (md,) = data.values()
        got.extend(int(x) for x in md.ids)

    ctfio.training_session(dp, step, mb_size=4, max_samples=30, progress=False).train()
    assert sorted(got) == sorted(k * 1000 + i for k in range(3) for i in range(10))


# ---------------------------------------------------------------------------------------------
# double buffering (CPU path; the CUDA path runs the same code with real copies)
# ---------------------------------------------------------------------------------------------

def _address(x):
    return x.data_ptr() if hasattr(x, "data_ptr") else x.__array_interface__["data"][0]


@pytest.fixture(params=["numpy", "torch"])
def backend(request, monkeypatch):
    """The staging backend: PyTorch when importable, else NumPy (forced here by hiding torch)."""
    if request.param == "numpy":
        monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    else:
        pytest.importorskip("torch")
    return request.param


def test_device_cpu_double_buffering_matches_plain_batches(backend):
    @provider(input_types={"id": integer_value(10**6), "x": dense_vector_sequence(2),
                           "s": sparse_vector(5)})
    def process(settings, filename):
        k = int(filename[1:])
        for i in range(3 + 4 * k):
            yield {"id": k * 1000 + i, "x": [[i, -i]] * (1 + i % 3), "s": [(i % 5, 0.5)]}

    plain = one_pass(process(files(4), batch_size=5, seed=8))
    dp = process(files(4), batch_size=5, seed=8, device="cpu")
    addrs = []
    n = 0
    for b, ref in zip(dp, plain):
        n += 1
        assert b.end_of_pass == ref.end_of_pass and b.num_samples == ref.num_samples
        for name in ("id", "x", "s"):
            assert b[name].num_samples == ref[name].num_samples
            for field in ("value", "ids", "indptr", "indices", "seq_starts", "sub_seq_starts"):
                want = getattr(ref[name], field)
                have = getattr(b[name], field)
                assert (want is None) == (have is None), (name, field)
                if want is not None:
                    assert type(have).__module__.split(".")[0] == backend
                    np.testing.assert_array_equal(np.asarray(have), want)
        addrs.append(_address(b["id"].value))
    assert n == len(plain) == 8  # 36 samples
    # two staging buffers, used alternately: no batch has more than 5 ids, so the buffers of
    # the first two batches serve all the others
    assert len(set(addrs)) == 2 and addrs[0::2] == [addrs[0]] * 4 and addrs[1::2] == [
        addrs[1]] * 4


def test_device_cpu_staging_grows_when_a_batch_needs_more_room(backend):
    @provider(input_types=[dense_vector_sequence(3)], calc_batch_size=lambda s: 1)
    def process(settings, filename):
        for n in (1, 1, 5, 1, 9, 2):
            yield [[[n] * 3] * n]

    got = [int(np.asarray(b[0].value).shape[0]) for b in
           process(["f"], batch_size=1, is_train=False, device="cpu")]
    assert got == [1, 1, 5, 1, 9, 2]


def test_device_needs_torch_unless_cpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ValueError, match="needs PyTorch"):
        id_provider(3)(files(1), batch_size=1, device="cuda")


def test_torch_device_cpu_batches_are_tensors():
    torch = pytest.importorskip("torch")
    dp = id_provider(7)(files(2), batch_size=3, seed=1, device=torch.device("cpu"))
    plain = id_provider(7)(files(2), batch_size=3, seed=1)
    for b, ref in zip(dp, plain):
        assert isinstance(b["id"].value, torch.Tensor) and b["id"].value.dtype == torch.int64
        assert b["id"].value.tolist() == ref["id"].ids.tolist()


# ---------------------------------------------------------------------------------------------
# the C records
# ---------------------------------------------------------------------------------------------

SLOTS = (("x", 0, 1, 3), ("y", 3, 0, 10))


def test_pack_rejects_foreign_or_damaged_records():
    rec = _ctfio.provider_encode([[[1, 2, 3]], 4], SLOTS, True, False)
    out = _ctfio.provider_pack([rec, rec], SLOTS, False)
    assert out[0][0] == 2 and out[1][0] == 2
    for bad in (rec[:-8], rec[:10], b"x" * len(rec), rec[:24] + b"\xff" * (len(rec) - 24)):
        with pytest.raises(ValueError, match="not a provider record"):
            _ctfio.provider_pack([bad], SLOTS, False)
    with pytest.raises(ValueError, match="encoded as float, packed as double"):
        _ctfio.provider_pack([rec], SLOTS, True)
    with pytest.raises(TypeError, match="must be bytes"):
        _ctfio.provider_pack(["x"], SLOTS, False)
    with pytest.raises(ValueError, match="not a provider record"):
        _ctfio.provider_pack([rec], (("x", 0, 0, 3), ("y", 3, 0, 10)), False)  # seq_type
    with pytest.raises(ValueError, match="not a provider record"):
        _ctfio.provider_pack([rec], (("x", 0, 1, 4), ("y", 3, 0, 10)), False)  # dim
    with pytest.raises(ValueError, match="slots"):
        _ctfio.provider_encode([[[1, 2, 3]], 4], (("x", 9, 0, 3),), True, False)
    empty = _ctfio.provider_pack([], SLOTS, False)
    assert empty[0][0] == 0 and bytes(empty[0][4]) == bytes(8)


def test_encode_refuses_strings_and_survives_a_list_that_changes():
    with pytest.raises(TypeError, match="got str"):
        _ctfio.provider_encode(["abc", 1], (("x", 0, 0, 3), ("y", 3, 0, 10)))
    victim = [1.0, 2.0, 3.0]

    class Evil:
        def __float__(self):
            victim.clear()
            return 0.0

    victim.insert(1, Evil())
    victim.pop(2)
    with pytest.raises(RuntimeError, match="changed size"):
        _ctfio.provider_encode([victim, 1], (("x", 0, 0, 3), ("y", 3, 0, 10)))


# ---------------------------------------------------------------------------------------------
# PaddlePaddle's two tutorial scenarios, as shipped examples
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["paddle_mnist.py", "paddle_sentiment.py"])
def test_examples_run(name):
    path = ROOT / "examples" / name
    if not path.exists():
        pytest.skip("%s not found" % name)
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ok" in out.stdout.splitlines()[-1]

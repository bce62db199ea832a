"""Tests of ctfio.MinibatchSource over CTF files: the behaviours CNTK's own Python io tests assert
(cntk/io/tests/io_tests.py), restated from docs/rules.md (sections 3, 6-9, 13): text format
contents, minibatch layout and views, zero-copy lifetime, sweeps and limits, randomization, the
nominal time axis, checkpoints, workers, errors, truncated BPTT, BrainScript configurations,
the GIL and memory."""

import gc
import json
import os
import sys
import threading
import time

import numpy as np
import pytest
from conftest import MBDATA_SPARSE_X, assert_rss_flat  # noqa: E402

import ctfio
from ctfio import (  # noqa: E402
    FULL_DATA_SWEEP,
    INFINITELY_REPEAT,
    CTFDeserializer,
    MinibatchSource,
    StreamDef,
    StreamDefs,
)

# -- helpers -------------------------------------------------------------------------------------

def sparse_source(path, **kw):
    kw.setdefault("randomize", False)
    return MinibatchSource(CTFDeserializer(path, StreamDefs(
        features=StreamDef(field="x", shape=1000, is_sparse=True),
        labels=StreamDef(field="y", shape=5, is_sparse=False))), **kw)


def dense_source(f, chunk_lines=5, **kw):
    """The dense file, by default in chunks of `chunk_lines` sequences."""
    kw.setdefault("chunk_size_in_bytes", chunk_lines * f.line_bytes)
    return MinibatchSource(CTFDeserializer(f.path, StreamDefs(
        features=StreamDef(field="x", shape=2), labels=StreamDef(field="y", shape=3))), **kw)


def seq_source(f, labels=True, defines_mb_size=False, **kw):
    kw.setdefault("chunk_size_in_bytes", 512)  # about 30 chunks
    streams = dict(features=StreamDef(field="x", shape=3))
    if labels:
        streams["labels"] = StreamDef(field="y", shape=5, defines_mb_size=defines_mb_size)
    return MinibatchSource(CTFDeserializer(f.path, StreamDefs(**streams)), **kw)


def features(src, mb):
    return mb[src.streams.features]


def keys(src, mb):
    return [] if not mb else [int(k) for k in features(src, mb).keys]


def take(src, sizes, **kw):
    """[(keys, feature values, end_of_sweep)] for next_minibatch(K) for K in sizes."""
    out = []
    for k in sizes:
        mb = src.next_minibatch(k, **kw)
        if not mb:
            out.append(None)
            continue
        f = features(src, mb)
        out.append((keys(src, mb), f.values.tolist(), f.end_of_sweep))
    return out


def flat_keys(src, k, calls):
    return [key for _ in range(calls) for key in keys(src, src.next_minibatch(k))]


def check_seq_data(f, mb_data, ks):
    """The features of a minibatch of the seq file are the file's rows of its sequences."""
    assert mb_data.values.tolist() == [row for key in ks for row in f.x[key]]
    assert mb_data.lengths.tolist() == [f.lengths[key] for key in ks]


# -- contents: CNTK's test_text_format / test_minibatch --------------------------------------------

def test_text_format_sparse_and_dense(sparse_file):
    src = sparse_source(sparse_file)
    fi, li = src.streams.features, src.stream_info("labels")
    assert fi is src.streams["features"] and li is src.streams.labels
    assert [si.name for si in src.stream_infos()] == ["features", "labels"]
    assert (fi.storage_format, fi.shape, fi.dtype) == ("sparse", (1000,), np.float32)
    assert (li.storage_format, li.shape, li.is_sparse) == ("dense", (5,), False)
    with pytest.raises(KeyError, match="nope"):
        src.stream_info("nope")

    mb = src.next_minibatch(7)
    assert set(mb) == {fi, li}
    f, l = mb[fi], mb[li]
    assert (f.num_sequences, f.num_samples) == (2, 7)
    assert (l.num_sequences, l.num_samples) == (2, 2)  # one label per sequence
    assert f.end_of_sweep and l.end_of_sweep and f.sweep_end
    assert f.keys.tolist() == l.keys.tolist() == [0, 1]
    assert f.lengths.tolist() == [3, 4] and l.lengths.tolist() == [1, 1]
    # padded views and masks
    assert f.shape == (2, 4, 1000) and l.shape == (2, 1, 5)
    assert f.mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert l.mask.tolist() == [[1], [1]]
    a = f.asarray()
    assert a.shape == (2, 4, 1000) and a.dtype == np.float32
    expected = np.zeros((2, 4, 1000), np.float32)
    for row, idx in MBDATA_SPARSE_X:
        expected[0 if row < 3 else 1, row if row < 3 else row - 3, idx] = 1
    assert np.array_equal(a, expected)
    assert l.asarray().tolist() == [[[1, 0, 0, 0, 0]], [[0, 1, 0, 0, 0]]]
    # sparse CSR over samples equals the file's entries
    m = f.csr()
    assert m.shape == (7, 1000)
    assert sorted(zip(*m.nonzero())) == MBDATA_SPARSE_X and m.data.tolist() == [1.0] * 7
    assert f.indptr.tolist() == list(range(8)) and f.indices.tolist() == [i for _, i in
                                                                          MBDATA_SPARSE_X]
    seqs = f.as_sequences()
    assert [s.shape for s in seqs] == [(3, 1000), (4, 1000)]
    assert l.values.tolist() == [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0]]


def test_first_sequence_always_taken_and_no_lookahead(sparse_file):
    src = sparse_source(sparse_file)
    # K=1: the first sequence (3 samples) is taken alone although it exceeds K.
    mb = src.next_minibatch(1)
    assert features(src, mb).num_samples == 3 and keys(src, mb) == [0]
    assert not features(src, mb).end_of_sweep
    mb = src.next_minibatch(6)  # sequence 1 (4) fits; sequence 0 of sweep 1 (3) does not
    assert keys(src, mb) == [1] and features(src, mb).end_of_sweep
    assert src.get_checkpoint_state()["minibatchSourcePosition"] == 7


def test_input_map_keys_results(sparse_file):
    src = sparse_source(sparse_file)
    mb = src.next_minibatch(7, input_map={"f": src.streams.features, "l": "labels"})
    assert set(mb) == {"f", "l"}
    assert mb["f"].num_samples == 7 and mb["l"].num_samples == 2
    assert mb["l"].asarray().tolist() == [[[1, 0, 0, 0, 0]], [[0, 1, 0, 0, 0]]]


def test_double_precision(sparse_file):
    src = sparse_source(sparse_file, precision="double")
    assert src.streams.labels.dtype == np.float64
    mb = src.next_minibatch(7)
    assert mb[src.streams.labels].values.dtype == np.float64
    assert mb[src.streams.features].csr().dtype == np.float64


def test_frame_mode_shapes_and_zero_copy(dense_file):
    src = dense_source(dense_file, randomize=False, frame_mode=True)
    mb = src.next_minibatch(5)
    f, l = mb[src.streams.features], mb[src.streams.labels]
    assert f.shape == (5, 2) and l.shape == (5, 3)
    a = f.asarray()
    assert a.shape == (5, 2) and a.tolist() == [dense_file.x[i] for i in range(5)]
    assert np.shares_memory(a, f.values)
    assert l.asarray().tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0], [0, 1, 0]]
    assert f.keys.tolist() == [0, 1, 2, 3, 4]


def test_frame_mode_rejects_multi_sample_sequences(sparse_file):
    src = sparse_source(sparse_file, frame_mode=True)
    with pytest.raises(ctfio.ParseError, match="sequence 0"):
        src.next_minibatch(7)


# -- zero copy and lifetime ----------------------------------------------------------------------

def test_zero_copy_and_lifetime(seq_file):
    src = seq_source(seq_file, randomize=True, randomization_seed=2)
    mb = src.next_minibatch(40)
    f = features(src, mb)
    assert np.shares_memory(f.values, f.values)
    assert np.shares_memory(f.lengths, f.lengths) and np.shares_memory(f.keys, f.keys)
    assert not f.values.flags.writeable
    held_values, held_keys = f.values, f.keys
    held_labels = mb[src.streams.labels].asarray()
    expected_keys = held_keys.tolist()
    expected_values = [row for k in expected_keys for row in seq_file.x[k]]
    del mb, f
    gc.collect()
    for _ in range(50):
        src.next_minibatch(40)
    assert held_keys.tolist() == expected_keys and held_values.tolist() == expected_values
    src.close()
    del src
    gc.collect()
    assert held_keys.tolist() == expected_keys and held_values.tolist() == expected_values
    assert held_labels[:, 0].argmax(axis=1).tolist() == [seq_file.y[k] for k in expected_keys]


# -- sweeps and limits ---------------------------------------------------------------------------

def test_end_of_sweep_flags(make_dense):
    f = make_dense(10)
    src = dense_source(f, randomize=False)
    flags = [features(src, src.next_minibatch(3)).end_of_sweep for _ in range(10)]
    # minibatch i covers positions [3i, 3i+3); the flag marks the one holding position 10k + 9
    assert flags == [any(p % 10 == 9 for p in range(3 * i, 3 * i + 3)) for i in range(10)]
    src = dense_source(f, randomize=True)
    assert all(features(src, src.next_minibatch(10)).end_of_sweep for _ in range(4))


def test_max_sweeps_then_empty_forever(dense_file):
    src = dense_source(dense_file, randomize=True, max_sweeps=1)
    got = take(src, [25, 25, 25, 25, 25])
    assert [len(g[0]) for g in got[:3]] == [25, 25, 10]
    assert [g[2] for g in got[:3]] == [False, False, True]
    assert sorted(k for g in got[:3] for k in g[0]) == list(range(60))
    assert got[3:] == [None, None]
    assert src.next_minibatch(1) == {}
    # a restore brings the data back
    src.restore_from_checkpoint(dense_source(dense_file, randomize=True,
                                             max_sweeps=1).get_checkpoint_state())
    assert keys(src, src.next_minibatch(25)) == got[0][0]


@pytest.mark.parametrize("limit", ["max_samples", "max_sweeps"])
def test_one_sweep_limits(seq_file, limit):
    kw = {limit: FULL_DATA_SWEEP if limit == "max_samples" else 1}
    src = seq_source(seq_file, randomize=True, **kw)
    ks = flat_keys(src, 64, 40)
    assert sorted(ks) == list(range(seq_file.n))
    assert src.next_minibatch(64) == {} and src.next_minibatch(1) == {}
    src = seq_source(seq_file, randomize=True, max_sweeps=2)
    mb = src.next_minibatch(10 ** 6)  # a minibatch larger than the data stops at the limit
    assert features(src, mb).num_samples == 2 * seq_file.samples
    assert src.next_minibatch(10 ** 6) == {}


def test_max_samples_count_overshoots(seq_file):
    # sequence lengths 1, 4, 3, 2, ...: the limit is checked before each sequence
    src = seq_source(seq_file, randomize=False, max_samples=2)
    assert take(src, [1, 1, 1, 1])[1:] == [([1], [r for r in seq_file.x[1]], False), None, None]
    src = seq_source(seq_file, randomize=False, max_samples=6)
    assert [g and g[0] for g in take(src, [5, 5, 5])] == [[0, 1], [2], None]
    assert src.get_checkpoint_state()["minibatchSourcePosition"] == 8


def test_infinitely_repeat(make_dense):
    src = dense_source(make_dense(10), randomize=False, max_samples=INFINITELY_REPEAT)
    assert flat_keys(src, 7, 100) == list(range(10)) * 70


def test_minibatch_spanning_many_sweeps(make_dense):
    f = make_dense(10)
    src = dense_source(f, randomize=False)
    mb = src.next_minibatch(35)
    assert keys(src, mb) == list(range(10)) * 3 + list(range(5))
    assert features(src, mb).end_of_sweep
    assert features(src, mb).values.tolist() == [f.x[k] for k in keys(src, mb)]
    assert take(src, [5, 5]) == [(list(range(5, 10)), [f.x[k] for k in range(5, 10)], True),
                                 (list(range(5)), [f.x[k] for k in range(5)], False)]
    # randomized: each sweep is a permutation in its own order
    src = dense_source(f, randomize=True, chunk_lines=2)
    ks = keys(src, src.next_minibatch(30))
    sweeps = [ks[0:10], ks[10:20], ks[20:30]]
    assert all(sorted(s) == list(range(10)) for s in sweeps)
    assert len({tuple(s) for s in sweeps}) > 1
    ref = dense_source(f, randomize=True, chunk_lines=2)
    assert flat_keys(ref, 10, 3) == ks


def test_defines_mb_size(seq_file, sparse_file):
    src = seq_source(seq_file, randomize=False, defines_mb_size=True)
    assert src.streams.labels.defines_mb_size and not src.streams.features.defines_mb_size
    start = 0
    for _ in range(5):
        mb = src.next_minibatch(10)
        l, f = mb[src.streams.labels], features(src, mb)
        assert (l.num_sequences, l.num_samples) == (10, 10)
        ks = list(range(start, start + 10))
        assert f.keys.tolist() == ks
        assert f.num_samples == sum(seq_file.lengths[k] for k in ks)
        check_seq_data(seq_file, f, ks)
        start += 10
    assert src.get_checkpoint_state()["minibatchSourcePosition"] == 50
    # CNTK's MBDATA_SPARSE: with y defining the size, K=1 is one sequence of 3 features samples
    src = MinibatchSource(CTFDeserializer(sparse_file, StreamDefs(
        features=StreamDef(field="x", shape=1000, is_sparse=True),
        labels=StreamDef(field="y", shape=5, defines_mb_size=True))), randomize=False)
    mb = src.next_minibatch(1)
    assert mb[src.streams.features].num_samples == 3 and mb[src.streams.labels].num_samples == 1


# -- randomization -------------------------------------------------------------------------------

def _sweeps(f, n_sweeps=2, **kw):
    src = dense_source(f, randomize=True, **kw)
    return [keys(src, src.next_minibatch(f.n)) for _ in range(n_sweeps)]


def test_seeds(dense_file):
    a, b = _sweeps(dense_file, randomization_seed=3), _sweeps(dense_file, randomization_seed=3)
    assert a == b
    assert all(sorted(s) == list(range(60)) for s in a) and a[0] != list(range(60))
    orders = [tuple(_sweeps(dense_file, 1, randomization_seed=s)[0]) for s in range(5)]
    assert len(set(orders)) == 5
    for s in (0, 7):  # sweep k uses seed s + k
        assert _sweeps(dense_file, randomization_seed=s)[1] == \
            _sweeps(dense_file, randomization_seed=s + 1)[0]


def test_randomize_false_is_file_order_every_sweep(dense_file):
    src = dense_source(dense_file, randomize=False, randomization_seed=5)
    assert flat_keys(src, 60, 3) == list(range(60)) * 3
    src = dense_source(dense_file, randomize=True, randomization_window_in_chunks=0)  # rules 5.7
    assert flat_keys(src, 60, 2) == list(range(60)) * 2


def test_cntk_test_vector(write_ctf):
    # rules 5.6: 5 chunks of 2 one-sample sequences, window over all chunks, seed 0
    path = write_ctf("".join("%d |x %d\n" % (i, i) for i in range(10)))
    src = MinibatchSource(CTFDeserializer(path, StreamDefs(features=StreamDef(field="x", shape=1))),
                          chunk_size_in_bytes=14)
    assert keys(src, src.next_minibatch(10)) == [6, 3, 1, 5, 9, 0, 4, 2, 7, 8]


def test_randomization_windows(dense_file):
    full = _sweeps(dense_file, randomization_window_in_chunks=10 ** 6)
    assert _sweeps(dense_file) == full  # default 128 chunks covers all 12
    assert _sweeps(dense_file, randomization_window_in_samples=10 ** 6) == full
    # one chunk: sequences only move inside their chunk, chunks move as blocks
    one = _sweeps(dense_file, randomization_window_in_chunks=1)
    for sweep in one:
        chunks = [k // 5 for k in sweep]
        assert all(len(set(chunks[i:i + 5])) == 1 for i in range(0, 60, 5))
        assert sorted(chunks[::5]) == list(range(12)) and sweep != list(range(60))
    assert one != full
    samples10 = _sweeps(dense_file, randomization_window_in_samples=10)
    assert all(sorted(s) == list(range(60)) for s in samples10)
    assert samples10 not in (full, one, _sweeps(dense_file, randomization_window_in_chunks=10))


# -- the nominal time axis -----------------------------------------------------------------------

def test_k_and_2k_see_one_timeline(seq_file):
    opts = dict(randomize=True, randomization_seed=4, randomization_window_in_chunks=6)
    a = flat_keys(seq_source(seq_file, **opts), 16, 160)
    b = flat_keys(seq_source(seq_file, **opts), 32, 80)
    m = min(len(a), len(b))
    assert m > 2 * seq_file.n and a[:m] == b[:m]


def test_changing_minibatch_size_keeps_the_order(seq_file):
    # CNTK's "prefetch with a changing final minibatch size": the prefetched minibatch for the
    # old size must not leak into the new one.
    sizes = [5] * 6 + [2] + [5] * 3 + [2, 2, 40, 1, 5, 5, 2] * 6
    opts = dict(randomize=True, randomization_seed=1, randomization_window_in_chunks=4)
    ref = take(seq_source(seq_file, **opts), sizes)
    for extra in (dict(num_threads=0), dict(num_threads=4, prefetch_chunks=1),
                  dict(num_threads=1, prefetch_chunks=16)):
        assert take(seq_source(seq_file, **opts, **extra), sizes) == ref
    timeline = flat_keys(seq_source(seq_file, **opts), 1, 400)
    got = [k for g in ref for k in g[0]]
    assert got == timeline[:len(got)]
    for g in ref:
        assert g[1] == [row for k in g[0] for row in seq_file.x[k]]


# -- checkpoints ---------------------------------------------------------------------------------

def _full(src, mb):
    return [(si.name, d.keys.tolist(), d.values.tolist(), d.lengths.tolist(), d.end_of_sweep)
            for si, d in sorted(mb.items(), key=lambda kv: kv[0].stream_id)]


def test_checkpoint_round_trip(seq_file):
    opts = dict(randomize=True, randomization_seed=9, randomization_window_in_chunks=5)
    src = seq_source(seq_file, **opts)
    assert src.get_checkpoint_state()["minibatchSourcePosition"] == 0
    delivered = 0
    for _ in range(10):
        delivered += features(src, src.next_minibatch(23)).num_samples
    state = src.get_checkpoint_state()
    assert isinstance(state, dict) and state["minibatchSourcePosition"] == delivered
    state = json.loads(json.dumps(state))
    expected = [_full(src, src.next_minibatch(23)) for _ in range(10)]
    for extra in ({}, dict(num_threads=0), dict(prefetch_chunks=1)):
        other = seq_source(seq_file, **opts, **extra)
        other.restore_from_checkpoint(state)
        assert [_full(other, other.next_minibatch(23)) for _ in range(10)] == expected


def test_current_position_get_set(seq_file):
    src = seq_source(seq_file, randomize=True)
    take(src, [17] * 3)
    pos = src.current_position
    assert pos["minibatchSourcePosition"] == src.get_checkpoint_state()["minibatchSourcePosition"]
    first = take(src, [17] * 5)
    src.current_position = pos
    assert take(src, [17] * 5) == first
    fresh = seq_source(seq_file, randomize=True)
    fresh.current_position = pos
    assert take(fresh, [17] * 5) == first


def test_checkpoint_of_other_data_or_config_is_state_error(seq_file, dense_file):
    src = seq_source(seq_file, randomize=True, randomization_seed=1)
    src.next_minibatch(10)
    state = src.get_checkpoint_state()
    for other in (dense_source(dense_file, randomize=True, randomization_seed=1),
                  seq_source(seq_file, randomize=True, randomization_seed=2),
                  seq_source(seq_file, randomize=True, randomization_seed=1,
                             chunk_size_in_bytes=1024)):
        with pytest.raises(ctfio.StateError) as ei:
            other.restore_from_checkpoint(state)
        assert isinstance(ei.value, ValueError)
        assert other.next_minibatch(1)  # still usable


def test_elastic_restore_two_to_three_workers(dense_file):
    opts = dict(randomize=True, randomization_seed=5)
    ref = [sorted(keys(r, mb)) for r in [dense_source(dense_file, **opts)]
           for mb in (r.next_minibatch(12) for _ in range(15))]
    two = [dense_source(dense_file, **opts) for _ in range(2)]
    got = []
    for _ in range(7):
        got.append(sorted(k for r, s in enumerate(two)
                          for k in keys(s, s.next_minibatch(12, num_data_partitions=2,
                                                            partition_index=r))))
    states = [s.get_checkpoint_state() for s in two]
    assert states[0] == states[1] and states[0]["minibatchSourcePosition"] == 84
    three = [dense_source(dense_file, **opts) for _ in range(3)]
    for s in three:
        s.restore_from_checkpoint(states[0])
    for _ in range(8):
        got.append(sorted(k for r, s in enumerate(three)
                          for k in keys(s, s.next_minibatch(12, num_data_partitions=3,
                                                            partition_index=r))))
    assert got == ref
    # sweeps 0 and 1 (5 calls each): every sequence exactly once
    for sweep in range(3):
        assert sorted(k for ks in got[5 * sweep:5 * sweep + 5] for k in ks) == list(range(60))


# -- workers -------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_workers_partition_the_global_minibatch(seq_file, n):
    opts = dict(randomize=True, randomization_seed=2, randomization_window_in_chunks=8)
    glob = seq_source(seq_file, **opts)
    ranks = [seq_source(seq_file, **opts) for _ in range(n)]
    for _ in range(40):
        g = keys(glob, glob.next_minibatch(16))
        shares = []
        for r, s in enumerate(ranks):
            mb = s.next_minibatch(16, num_data_partitions=n, partition_index=r)
            assert mb  # never {} while the data lasts, even when the share is empty
            ks = keys(s, mb)
            check_seq_data(seq_file, features(s, mb), ks)
            assert ks == [k for k in g if k in set(ks)]  # in global order
            shares.append(ks)
        assert sorted(k for ks in shares for k in ks) == sorted(g)
        assert len({k for ks in shares for k in ks}) == len(g)


@pytest.mark.parametrize("randomize", [False, True])
def test_workers_every_sequence_once_per_sweep(seq_file, randomize):
    for n in (2, 3, 4):
        ranks = [seq_source(seq_file, randomize=randomize, max_sweeps=1) for _ in range(n)]
        seen, ends = [], []
        for r, s in enumerate(ranks):
            calls = 0
            while True:
                # rules 7.1 spelling here; CNTK's num_data_partitions/partition_index elsewhere
                mb = s.next_minibatch(50, number_of_workers=n, worker_rank=r)
                if not mb:
                    break
                seen += keys(s, mb)
                calls += 1
            ends.append(calls)
            assert s.next_minibatch(50, num_data_partitions=n, partition_index=r) == {}
        assert sorted(seen) == list(range(seq_file.n))
        assert len(set(ends)) == 1  # the end comes at the same call for all workers


def test_worker_ownership(dense_file):
    # without randomization: the i-th sequence of the sweep belongs to worker i mod N
    for n in (2, 3):
        for r in range(n):
            src = dense_source(dense_file, randomize=False)
            ks = [k for _ in range(6)
                  for k in keys(src, src.next_minibatch(10, num_data_partitions=n,
                                                        partition_index=r))]
            assert ks == [i for i in range(60) if i % n == r]
    # with randomization: whole chunks (5 sequences) go to one worker, by the chunk's position in
    # the sweep current after the cut (docs/design.md: the minibatch that ends sweep s, here call
    # 6s + 5, is split by sweep s + 1's map); the map changes every sweep
    owners = {}
    for r in range(3):
        src = dense_source(dense_file, randomize=True, randomization_seed=1)
        for call in range(18):
            for k in keys(src, src.next_minibatch(10, num_data_partitions=3, partition_index=r)):
                owners.setdefault(((call + 1) // 6, k // 5), set()).add(r)
    assert all(len(v) == 1 for v in owners.values()), owners
    maps = [[owners.get((s, c)) for c in range(12)] for s in range(3)]
    assert None not in maps[1] and None not in maps[2] and maps[1] != maps[2]


def test_empty_share_is_not_the_end(dense_file):
    ranks = [dense_source(dense_file, randomize=False, max_sweeps=1) for _ in range(4)]
    for call in range(60):
        for r, s in enumerate(ranks):
            mb = s.next_minibatch(1, num_data_partitions=4, partition_index=r)
            assert isinstance(mb, dict) and set(mb) == set(s.stream_infos())
            f = features(s, mb)
            if call % 4 == r:
                assert f.keys.tolist() == [call] and f.values.tolist() == [dense_file.x[call]]
            else:
                assert all(d.num_sequences == 0 and d.num_samples == 0 for d in mb.values())
                assert f.values.shape == (0, 2) and mb[s.streams.labels].values.shape == (0, 3)
                assert f.asarray().shape[0] == 0
    for r, s in enumerate(ranks):
        assert s.next_minibatch(1, num_data_partitions=4, partition_index=r) == {}


# -- errors --------------------------------------------------------------------------------------

BAD = ("0 |x 1 2 3 |y 1 0 0 0 0\n"
       "0 |x 4 5 z\n"
       "1 |x 7 8 9 |y 0 1 0 0 0\n"
       "2 |x 1 1 1 |y 0 0 1 0 0\n"
       "2 |x 2 q 2\n"
       "3 |x 3 3 3 |y 0 0 0 1 0\n")


def _bad_source(path, **kw):
    return MinibatchSource(CTFDeserializer(path, StreamDefs(
        features=StreamDef(field="x", shape=3), labels=StreamDef(field="y", shape=5))),
        randomize=False, **kw)


def test_max_errors_reaches_the_parser(write_ctf):
    path = write_ctf(BAD)
    src = _bad_source(path, max_errors=2, trace_level=0)
    mb = src.next_minibatch(100)
    f = features(src, mb)
    assert f.keys.tolist()[:4] == [0, 1, 2, 3]
    assert f.values.tolist()[:4] == [[1, 2, 3], [7, 8, 9], [1, 1, 1], [3, 3, 3]]
    st = src.stats()
    assert st["errors"] == 2
    assert {s["name"]: s["dropped_samples"] for s in st["streams"]} == {"features": 2,
                                                                        "labels": 0}
    # the same through the deserializer's options
    src = MinibatchSource(CTFDeserializer(path, StreamDefs(
        features=StreamDef(field="x", shape=3), labels=StreamDef(field="y", shape=5)),
        max_errors=2), randomize=False, trace_level=0)
    assert features(src, src.next_minibatch(6)).num_samples == 4


def test_max_errors_exceeded_raises_parse_error(write_ctf):
    path = write_ctf(BAD)
    src = _bad_source(path, max_errors=1, trace_level=0)
    with pytest.raises(ctfio.ParseError) as ei:
        src.next_minibatch(100)
    e = ei.value
    assert isinstance(e, ValueError) and isinstance(e, ctfio.CTFError)
    offset = BAD.index("q")
    assert (e.path, e.line, e.column, e.offset) == (path, 5, 8, offset)
    assert "reached the maximum number of allowed errors (1)" in str(e)
    with pytest.raises(ctfio.ParseError):  # the default, 0, stops at the first error
        _bad_source(path, trace_level=0).next_minibatch(100)


def test_bad_configurations_name_the_parameter(seq_file, tmp_path):
    with pytest.raises(ValueError, match="shape"):
        StreamDef(shape=0)
    with pytest.raises(ValueError, match="definesMBSize|defines_mb_size"):
        MinibatchSource(CTFDeserializer(seq_file.path, StreamDefs(
            a=StreamDef(field="x", shape=3, defines_mb_size=True),
            b=StreamDef(field="y", shape=5, defines_mb_size=True))))
    with pytest.raises(ValueError, match="randomization_window"):
        seq_source(seq_file, randomization_window_in_chunks=4, randomization_window_in_samples=9)
    with pytest.raises(ValueError, match="max_samples"):
        seq_source(seq_file, max_samples=10, max_sweeps=1)
    with pytest.raises(ValueError, match="truncation_length"):
        seq_source(seq_file, frame_mode=True, truncation_length=4)
    missing = str(tmp_path / "missing.ctf")
    with pytest.raises(FileNotFoundError):
        seq_source(type(seq_file)(path=missing))


# -- truncated BPTT ------------------------------------------------------------------------------

def _pieces(src, calls, k):
    out = []
    for _ in range(calls):
        f = features(src, src.next_minibatch(k))
        out.append((f.keys.tolist(), f.lengths.tolist(), f.values.tolist()))
    return out


@pytest.mark.parametrize("randomize", [False, True])
def test_truncation(seq_file, randomize):
    t, k = 2, 7  # P = 7 div 2 = 3 slots
    src = seq_source(seq_file, labels=False, randomize=randomize, truncation_length=t)
    mbs = _pieces(src, 200, k)
    done, partial = 0, {}
    for ks, lengths, values in mbs:
        assert max(lengths) <= t and sum(lengths) == 3 * t
        rows = iter(values)
        for key, n in zip(ks, lengths):
            acc = partial.setdefault(key, [])
            acc += [next(rows) for _ in range(n)]
            assert acc == seq_file.x[key][:len(acc)]  # pieces continue where they stopped
            if len(acc) == seq_file.lengths[key]:
                del partial[key]
                done += 1
    assert done > seq_file.n  # more than a sweep went through whole
    # restore mid-sequence continues exactly
    cut = next(i for i in range(2, 50) if set(mbs[i][0]) & set(mbs[i + 1][0]))
    src = seq_source(seq_file, labels=False, randomize=randomize, truncation_length=t)
    head = _pieces(src, cut + 1, k)  # ends inside a sequence
    state = src.get_checkpoint_state()
    other = seq_source(seq_file, labels=False, randomize=randomize, truncation_length=t)
    other.restore_from_checkpoint(state)
    assert head + _pieces(other, 10, k) == mbs[:cut + 11]


# -- BrainScript configuration -------------------------------------------------------------------

@pytest.mark.parametrize("form", ["plain", "composite"])
def test_from_config(seq_file, tmp_path, form):
    inputs = ('input = [\n'
              '    features = [ alias = "x" ; dim = 3 ; format = "dense" ]\n'
              '    labels = [ alias = "y" ; dim = 5 ; format = "dense" ]\n'
              '  ]\n')
    opts = ('file = "%s"\n  randomizationSeed = 3\n  randomizationWindow = 5\n'
            '  chunkSizeInBytes = 512\n  maxErrors = 0\n' % seq_file.path)
    if form == "plain":
        text = 'reader = [\n  readerType = "CNTKTextFormatReader"\n  %s  %s]\n' % (opts, inputs)
    else:
        text = ('reader = {\n  randomizationSeed = 3\n  randomizationWindow = 5\n'
                '  deserializers = ({\n  type = "CNTKTextFormatDeserializer"\n'
                '  file = "%s"\n  chunkSizeInBytes = 512\n  %s})\n}\n' % (seq_file.path, inputs))
    cfg = tmp_path / "reader.cntk"
    cfg.write_text(text)
    a = MinibatchSource.from_config(str(cfg))
    b = seq_source(seq_file, randomization_seed=3, randomization_window_in_chunks=5,
                   chunk_size_in_bytes=512)
    assert [si.name for si in a.stream_infos()] == ["features", "labels"]
    ra = [_full(a, a.next_minibatch(19)) for _ in range(15)]
    assert ra == [_full(b, b.next_minibatch(19)) for _ in range(15)]
    c = seq_source(seq_file, randomization_seed=4, randomization_window_in_chunks=5)
    assert ra != [_full(c, c.next_minibatch(19)) for _ in range(15)]
    a2 = MinibatchSource.from_config(str(cfg), randomize=False)
    assert keys(a2, a2.next_minibatch(10)) == [0, 1, 2, 3]  # lengths 1+4+3+2


# -- the GIL and memory --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    """About 5 MB: 40000 one-line sequences of 16 values."""
    p = tmp_path_factory.mktemp("big") / "big.ctf"
    row = " ".join("%.4f" % (v / 7) for v in range(16))
    p.write_text("".join("%d |a %s\n" % (i, row) for i in range(40000)))
    assert p.stat().st_size > 4 * 2**20
    return str(p)


@pytest.mark.parametrize("threads", [0, 2])
def test_gil_released_while_reading(big_file, threads):
    counter = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counter[0] += 1
            time.sleep(0)  # releases the GIL at once, so the reader gets it back quickly

    old = sys.getswitchinterval()
    # With a long switch interval the counting thread can only run while the main thread has
    # released the GIL itself: its Python code between the two reads below never yields.
    sys.setswitchinterval(30)
    t = threading.Thread(target=count, daemon=True)
    try:
        t.start()
        src = MinibatchSource(CTFDeserializer(big_file, StreamDefs(a=StreamDef(shape=16))),
                              randomize=False, num_threads=threads)
        before = counter[0]
        mb = src.next_minibatch(40000)
        during = counter[0] - before
    finally:
        stop.set()
        sys.setswitchinterval(old)
        t.join(10)
    assert mb[src.streams.a].num_samples == 40000
    assert during > 0


@pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""),
                    reason="AddressSanitizer's quarantine keeps freed memory resident")
def test_no_leak_over_10k_minibatches(write_ctf):
    dim = 256
    path = write_ctf("".join("%d |a %s |b %d:1\n" % (i, " ".join(["0.5"] * dim), i)
                             for i in range(64)))
    src = MinibatchSource(CTFDeserializer(path, StreamDefs(
        a=StreamDef(shape=dim), b=StreamDef(shape=64, is_sparse=True))),
        randomize=False, keep_data_in_memory=True)

    def step():
        mb = src.next_minibatch(64)  # 64 KB of values per call: a leak would be ~640 MB
        a, b = mb[src.streams.a], mb[src.streams.b]
        assert a.values.shape == (64, dim) and b.indices.shape == (64,)
        a.keys, a.mask, b.csr(), a.asarray()

    assert_rss_flat(step, warmup=500, calls=10000, limit_mib=30)


def test_stream_information_hash_is_kept_and_follows_changes():
    import copy
    import pickle
    a = ctfio.StreamInformation("x", 0, "dense", "float32", 3)
    b = ctfio.StreamInformation("x", 0, "sparse", "float64", (5,))
    assert a == b and hash(a) == hash(b) == hash(("x", 0))
    d = {a: 1}
    assert d[b] == 1
    b.stream_id = 1                      # a change of name or id re-makes the hash
    assert a != b and hash(b) == hash(("x", 1))
    b.name = "y"
    assert hash(b) == hash(("y", 1))
    for c in (pickle.loads(pickle.dumps(b)), copy.copy(b), copy.deepcopy(b)):
        assert c == b and hash(c) == hash(b)
        assert (c.storage_format, c.dtype, c.shape) == ("sparse", b.dtype, (5,))
    odd = ctfio.StreamInformation(["unhashable"], 0, "dense", "float32", 1)
    with pytest.raises(TypeError):
        hash(odd)


def test_worker_arguments_must_be_integers(dense_file):
    # 2.5 workers is a mistake, not 2 workers: refused like a bad minibatch size, before reading
    src = dense_source(dense_file, randomize=False)
    for kw in (dict(num_data_partitions=2.5, partition_index=0),
               dict(number_of_workers=2, worker_rank=1.0), dict(number_of_workers="2")):
        with pytest.raises(TypeError, match="must be an int"):
            src.next_minibatch(10, **kw)
    mb = src.next_minibatch(10, number_of_workers=np.int64(2), worker_rank=np.int32(1))
    assert keys(src, mb) == [1, 3, 5, 7, 9]

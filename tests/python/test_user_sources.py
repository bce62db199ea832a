"""User-defined sources (rules 11): MinibatchSourceFromData with the file reader's minibatch, sweep,
worker and checkpoint semantics (rules 6-8), and CNTK's UserMinibatchSource tutorial example."""

import json

import numpy as np
import pytest

import ctfio
from ctfio import FULL_DATA_SWEEP, INFINITELY_REPEAT, MinibatchSourceFromData

sp = pytest.importorskip("scipy.sparse")


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

def by_name(mb):
    return {si.name: md for si, md in mb.items()}


def ids(mb, stream="id"):
    """The sequence ids of a minibatch: stream ``id`` holds the sequence's index in every
    sample."""
    md = by_name(mb)[stream]
    return [int(s[0, 0]) for s in md.as_sequences()]


def reference_cut(lengths, k, pos_seq, limit=None, pos=0):
    """Independent model of rules 6.1/6.2/6.4 over the endless timeline 0..n-1, 0..n-1, ...:
    returns (global sequence indices taken, new pos_seq, new pos, end_of_sweep)."""
    n = len(lengths)
    taken, total, eos = [], 0, False
    while limit is None or pos < limit:
        ln = lengths[pos_seq % n]
        if taken and total + ln > k:
            break
        taken.append(pos_seq % n)
        if pos_seq % n == n - 1:
            eos = True
        total += ln
        pos += ln
        pos_seq += 1
    return taken, pos_seq, pos, eos


def make_seq_source(lengths, max_samples=INFINITELY_REPEAT, dim=3, label_every_sequence=True):
    """Stream 'id' (dim 1, the sequence index per sample), 'x' (variable-length, dim ``dim``),
    'y' (one label per sequence, dense array)."""
    rng = np.random.default_rng(len(lengths))
    id_seqs = [np.full((ln, 1), i, np.float32) for i, ln in enumerate(lengths)]
    x_seqs = [rng.standard_normal((ln, dim)).astype(np.float32) for ln in lengths]
    y = np.eye(4, dtype=np.float32)[np.arange(len(lengths)) % 4]
    src = MinibatchSourceFromData(dict(id=id_seqs, x=x_seqs, y=y), max_samples=max_samples)
    return src, x_seqs, y


LENGTHS = [3, 1, 4, 2, 5, 1, 1, 3, 2, 6, 1, 2]


# ---------------------------------------------------------------------------------------------
# construction, stream infos, dtypes, errors
# ---------------------------------------------------------------------------------------------

def test_exported():
    assert "MinibatchSourceFromData" in ctfio.__all__
    assert issubclass(MinibatchSourceFromData, ctfio.UserMinibatchSource)
    assert issubclass(MinibatchSourceFromData, ctfio.MinibatchSource)


def test_dense_arrays_one_sample_per_sequence():
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10)                                   # int, 1-D -> float32, dim 1
    src = MinibatchSourceFromData(dict(x=x, y=y))
    infos = src.stream_infos()
    assert [(si.name, si.stream_id, si.storage_format, si.shape) for si in infos] == \
        [("x", 0, "dense", (2,)), ("y", 1, "dense", (1,))]
    assert infos[0].dtype == np.float32 and infos[1].dtype == np.float32
    assert src.streams.x is infos[0] or src.streams.x == infos[0]

    mb = src.next_minibatch(4)
    assert set(mb) == set(infos)
    mx, my = mb[infos[0]], mb[infos[1]]
    assert (mx.num_sequences, mx.num_samples, my.num_sequences, my.num_samples) == (4, 4, 4, 4)
    assert not mx.is_sparse and mx.dim == 2 and my.dim == 1
    np.testing.assert_array_equal(mx.values, x[:4])
    np.testing.assert_array_equal(my.values[:, 0], [0, 1, 2, 3])
    assert mx.values.dtype == np.float32 and my.values.dtype == np.float32
    np.testing.assert_array_equal(mx.lengths, [1, 1, 1, 1])
    assert mx.asarray().shape == (4, 1, 2)
    np.testing.assert_array_equal(mx.asarray()[:, 0], x[:4])
    np.testing.assert_array_equal(mx.mask, np.ones((4, 1)))
    seqs = mx.as_sequences()
    assert len(seqs) == 4 and all(s.shape == (1, 2) for s in seqs)
    assert mx.shape == (4, 1, 2)

    mb = src.next_minibatch(4)
    np.testing.assert_array_equal(by_name(mb)["x"].values, x[4:8])


@pytest.mark.parametrize("dtype,expected", [(np.float32, np.float32), (np.float64, np.float64),
                                            (np.int64, np.float32), (np.float16, np.float32),
                                            (np.bool_, np.float32), (np.uint8, np.float32)])
def test_dtypes(dtype, expected):
    x = (np.arange(12).reshape(6, 2) % 2).astype(dtype)
    seqs = [np.ones((2, 3), dtype), np.ones((1, 3), dtype)]
    src = MinibatchSourceFromData(dict(x=x))
    assert src.stream_infos()[0].dtype == expected
    assert by_name(src.next_minibatch(2))["x"].values.dtype == expected
    src = MinibatchSourceFromData(dict(q=seqs))
    assert src.stream_infos()[0].dtype == expected
    assert by_name(src.next_minibatch(5))["q"].asarray().dtype == expected
    if dtype != np.float16:                                  # SciPy has no float16 sparse
        src = MinibatchSourceFromData(dict(s=sp.csr_matrix(np.eye(4)).astype(dtype)))
        assert src.stream_infos()[0].dtype == expected
        assert by_name(src.next_minibatch(2))["s"].csr().dtype == expected


def test_mixed_precision_sequences_promote_to_float64():
    src = MinibatchSourceFromData(dict(q=[np.ones((2, 3), np.float32), np.ones((1, 3))]))
    assert src.stream_infos()[0].dtype == np.float64


def test_construction_errors():
    x = np.zeros((5, 2), np.float32)
    with pytest.raises(ValueError, match="'labels'"):
        MinibatchSourceFromData(dict(features=x, labels=np.zeros((4, 3))))
    with pytest.raises(ValueError, match="'labels'"):
        MinibatchSourceFromData(dict(features=x, labels=[np.zeros((2, 3))] * 6))
    with pytest.raises(ValueError):
        MinibatchSourceFromData({})
    with pytest.raises(ValueError, match="no sequence"):
        MinibatchSourceFromData(dict(x=np.zeros((0, 2))))
    with pytest.raises(ValueError, match="no sequence"):
        MinibatchSourceFromData(dict(x=[]))
    with pytest.raises(ValueError, match="sequence 1 is empty"):
        MinibatchSourceFromData(dict(x=[np.zeros((2, 2)), np.zeros((0, 2))]))
    with pytest.raises(ValueError, match="dimensions"):
        MinibatchSourceFromData(dict(x=[np.zeros((2, 2)), np.zeros((1, 3))]))
    with pytest.raises(ValueError, match="1-D or 2-D"):
        MinibatchSourceFromData(dict(x=np.zeros((4, 2, 2))))
    with pytest.raises(ValueError, match="numeric"):
        MinibatchSourceFromData(dict(x=np.array([["a"], ["b"]])))
    with pytest.raises(ValueError, match="mix"):
        MinibatchSourceFromData(dict(x=[np.zeros((2, 2)), sp.csr_matrix(np.zeros((1, 2)))]))
    with pytest.raises(TypeError, match="type"):
        MinibatchSourceFromData(dict(x=(x, "Tensor[2]")))
    with pytest.raises(ValueError, match="max_samples"):
        MinibatchSourceFromData(dict(x=x), max_samples=-3)
    src = MinibatchSourceFromData(dict(x=x))
    with pytest.raises(ValueError, match="num_samples"):
        src.next_minibatch(0)
    with pytest.raises(ValueError, match="worker_rank"):
        src.next_minibatch(2, number_of_workers=2, worker_rank=2)


# ---------------------------------------------------------------------------------------------
# sequences and sparse data
# ---------------------------------------------------------------------------------------------

def test_sequences_minibatch_counts_longest_stream():
    src, x_seqs, y = make_seq_source([3, 1, 4, 2, 5])
    # K=4: [3, 1] (4), [4], [2] (+5 does not fit: no look-ahead), [5] alone (longer than K).
    expected = [[0, 1], [2], [3], [4], [0, 1]]
    for want in expected:
        mb = by_name(src.next_minibatch(4))
        got = [int(s[0, 0]) for s in mb["id"].as_sequences()]
        assert got == want
        mx, my = mb["x"], mb["y"]
        assert mx.num_sequences == my.num_sequences == len(want)
        assert mx.num_samples == sum(len(x_seqs[i]) for i in want)
        assert my.num_samples == len(want)                 # one label per sequence
        np.testing.assert_array_equal(mx.lengths, [len(x_seqs[i]) for i in want])
        for got_seq, i in zip(mx.as_sequences(), want):
            np.testing.assert_array_equal(got_seq, x_seqs[i])
        np.testing.assert_array_equal(np.concatenate([x_seqs[i] for i in want]), mx.values)
        np.testing.assert_array_equal(my.values, y[want])
        pad = mx.asarray()
        width = max(len(x_seqs[i]) for i in want)
        assert pad.shape == (len(want), width, 3)
        np.testing.assert_array_equal(
            mx.mask, [[1] * len(x_seqs[i]) + [0] * (width - len(x_seqs[i])) for i in want])
        for row, i in zip(pad, want):
            np.testing.assert_array_equal(row[:len(x_seqs[i])], x_seqs[i])
            assert not row[len(x_seqs[i]):].any()


def test_longest_stream_of_each_sequence_counts():
    # stream a: lengths 1,3 ; stream b: lengths 2,1 -> sequence lengths 2, 3 (sweep 5 samples).
    a = [np.ones((1, 1)), np.ones((3, 1))]
    b = [np.ones((2, 2)), np.ones((1, 2))]
    src = MinibatchSourceFromData(dict(a=a, b=b))
    assert src.get_checkpoint_state()["samples_per_sweep"] == 5
    mb = by_name(src.next_minibatch(4))                       # 2 + 3 > 4: only the first
    assert (mb["a"].num_sequences, mb["a"].num_samples, mb["b"].num_samples) == (1, 1, 2)
    assert src.get_checkpoint_state()["position"] == 2
    mb = by_name(src.next_minibatch(5))                       # 3 + 2 = 5: both (new sweep)
    assert (mb["a"].num_sequences, mb["a"].num_samples, mb["b"].num_samples) == (2, 4, 3)
    assert mb["a"].end_of_sweep and mb["b"].end_of_sweep


def test_one_dimensional_sequences_are_scalar_samples():
    src = MinibatchSourceFromData(dict(t=[np.arange(3), np.arange(2)]))
    si = src.stream_infos()[0]
    assert si.shape == (1,)
    md = src.next_minibatch(5)[si]
    np.testing.assert_array_equal(md.lengths, [3, 2])
    np.testing.assert_array_equal(md.values[:, 0], [0, 1, 2, 0, 1])


def test_sparse_matrix_rows_are_sequences():
    rng = np.random.default_rng(1)
    dense = (rng.random((9, 12)) < 0.25) * rng.integers(1, 9, (9, 12))
    m = sp.csr_matrix(dense.astype(np.float32))
    src = MinibatchSourceFromData(dict(s=m, lab=np.arange(9)))
    si = src.streams.s
    assert si.storage_format == "sparse" and si.shape == (12,) and si.dtype == np.float32
    assert src.streams.lab.storage_format == "dense"
    got = []
    for _ in range(3):
        md = src.next_minibatch(4)[si]
        assert md.is_sparse
        n = md.num_sequences
        rows = dense[[t % 9 for t in range(len(got), len(got) + n)]]
        got.extend(range(n))
        assert md.num_samples == n
        np.testing.assert_array_equal(md.lengths, np.ones(n))
        c = md.csr()
        assert c.shape == (n, 12)
        np.testing.assert_array_equal(c.toarray(), rows)
        # values are the non-zeros, as for the CTF reader's sparse streams
        np.testing.assert_array_equal(md.values, c.data)
        np.testing.assert_array_equal(md.indptr, c.indptr)
        np.testing.assert_array_equal(md.indices, c.indices)
        seqs = md.as_sequences()
        assert len(seqs) == n and all(s.shape == (1, 12) for s in seqs)
        np.testing.assert_array_equal(np.vstack([s.toarray() for s in seqs]), rows)
        np.testing.assert_array_equal(md.asarray()[:, 0, :], rows)
        assert md.end_of_sweep == (len(got) > 9)
    assert len(got) == 12


def test_sparse_sequences():
    rng = np.random.default_rng(2)
    lens = [2, 5, 1, 3]
    seqs = [sp.random(n, 20, density=0.3, format="coo", random_state=int(rng.integers(1000)),
                      dtype=np.float64) for n in lens]
    src = MinibatchSourceFromData(dict(s=seqs, id=[np.full((n, 1), i) for i, n in
                                                   enumerate(lens)]))
    assert src.streams.s.dtype == np.float64 and src.streams.s.storage_format == "sparse"
    mb = src.next_minibatch(7)                               # 2 + 5
    md = mb[src.streams.s]
    assert (md.num_sequences, md.num_samples) == (2, 7)
    np.testing.assert_array_equal(md.lengths, [2, 5])
    for got, want in zip(md.as_sequences(), seqs[:2]):
        np.testing.assert_array_equal(got.toarray(), want.toarray())
    pad = md.asarray()
    assert pad.shape == (2, 5, 20)
    np.testing.assert_array_equal(pad[0, :2], seqs[0].toarray())
    assert not pad[0, 2:].any()
    np.testing.assert_array_equal(md.csr().toarray(),
                                  np.vstack([s.toarray() for s in seqs[:2]]))


def test_value_inputs():
    v = ctfio.Value.one_hot([[1, 2], [0], [3, 3, 1]], 4)
    d = ctfio.Value([np.ones((2, 2)), np.zeros((1, 2)), np.full((3, 2), 2.0)])
    src = MinibatchSourceFromData(dict(v=v, d=d))
    assert src.streams.v.storage_format == "sparse" and src.streams.d.storage_format == "dense"
    mb = by_name(src.next_minibatch(3))
    np.testing.assert_array_equal(mb["v"].asarray()[0], np.eye(4)[[1, 2]])
    np.testing.assert_array_equal(mb["v"].asarray()[1, :1], np.eye(4)[[0]])
    np.testing.assert_array_equal(mb["d"].as_sequences()[1], np.zeros((1, 2)))


# ---------------------------------------------------------------------------------------------
# minibatch sizes, first sequence, no empty batches, sweeps, limits
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 2, 3, 5, 7, 16, 40, 100])
def test_minibatches_match_reference_model(k):
    src, _, _ = make_seq_source(LENGTHS)
    pos_seq = pos = 0
    for _ in range(25):
        mb = src.next_minibatch(k)
        want, pos_seq, pos, eos = reference_cut(LENGTHS, k, pos_seq, pos=pos)
        assert ids(mb) == want
        m = by_name(mb)
        assert m["id"].num_samples == sum(LENGTHS[i] for i in want)
        assert m["id"].num_samples <= k or len(want) == 1     # only a lone sequence overshoots
        assert all(md.end_of_sweep == eos for md in mb.values())
        assert src.get_checkpoint_state()["position"] == pos


def test_first_sequence_always_taken_and_long_sequence_comes_alone():
    # CNTK's MinibatchSourceFromData returned an empty minibatch forever here (rules 11).
    src, x_seqs, _ = make_seq_source([5, 1, 7, 2])
    seen = []
    for _ in range(12):
        mb = src.next_minibatch(2)
        assert mb, "never empty with INFINITELY_REPEAT"
        got = ids(mb)
        assert len(got) >= 1
        seen.extend(got)
        if len(x_seqs[got[0]]) > 2:
            assert got == [got[0]]                            # returned alone
    # [5] [1] [7] [2] [5] ... (1 + 7 > 2; 2 fits alone)
    assert seen == [0, 1, 2, 3] * 3


def test_sweep_boundaries_are_crossed():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    src = MinibatchSourceFromData(dict(x=x))
    got = []
    for _ in range(5):
        md = src.next_minibatch(4)[src.streams.x]
        got.append((md.values[:, 0].astype(int).tolist(), md.end_of_sweep))
    assert got == [([0, 1, 2, 3], False), ([4, 5, 6, 7], False), ([8, 9, 0, 1], True),
                   ([2, 3, 4, 5], False), ([6, 7, 8, 9], True)]
    # a request larger than the corpus spans several sweeps
    md = src.next_minibatch(25)[src.streams.x]
    assert md.values[:, 0].astype(int).tolist() == list(range(10)) * 2 + list(range(5))
    assert md.end_of_sweep


def test_max_samples_count_with_overshoot_and_end():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    src = MinibatchSourceFromData(dict(x=x), max_samples=7)
    sizes = [src.next_minibatch(3)[src.streams.x].num_samples for _ in range(3)]
    assert sizes == [3, 3, 1]
    for _ in range(3):
        assert src.next_minibatch(3) == {}
    # sequences: stop before a sequence once the position has reached the limit; overshoot ok
    src, _, _ = make_seq_source([3, 3, 3], max_samples=4)
    mb = src.next_minibatch(100)
    assert ids(mb) == [0, 1] and by_name(mb)["x"].num_samples == 6
    assert src.next_minibatch(100) == {} and src.next_minibatch(1) == {}
    # the limit may lie beyond one sweep
    src, _, _ = make_seq_source([3, 1, 4], max_samples=10)
    got = []
    while True:
        mb = src.next_minibatch(2)
        if not mb:
            break
        got.extend(ids(mb))
    assert got == [0, 1, 2, 0]                               # positions 0 3 4 8, then 11
    assert src.next_minibatch(2) == {}
    assert MinibatchSourceFromData(dict(x=x), max_samples=0).next_minibatch(5) == {}


def test_full_data_sweep():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    src = MinibatchSourceFromData(dict(x=x), max_samples=FULL_DATA_SWEEP)
    got = []
    for _ in range(3):
        md = src.next_minibatch(4)[src.streams.x]
        got.append((md.values[:, 0].astype(int).tolist(), md.end_of_sweep))
    assert got == [([0, 1, 2, 3], False), ([4, 5, 6, 7], False), ([8, 9], True)]
    for _ in range(3):
        assert src.next_minibatch(4) == {}
    # a request larger than the data still stops at the sweep's end
    src, _, _ = make_seq_source(LENGTHS, max_samples=FULL_DATA_SWEEP)
    assert ids(src.next_minibatch(1000)) == list(range(len(LENGTHS)))
    assert src.next_minibatch(1000) == {}


@pytest.mark.parametrize("k", [1, 3, 4, 9])
def test_nominal_time_axis(k):
    def run(size, samples):
        src, _, _ = make_seq_source(LENGTHS)
        order = []
        while src.get_checkpoint_state()["position"] < samples:
            order.extend(ids(src.next_minibatch(size)))
        return order
    a, b = run(k, 200), run(2 * k, 200)
    n = min(len(a), len(b))
    assert n > 2 * len(LENGTHS)
    assert a[:n] == b[:n]


def test_input_map_and_cntk_partition_keywords():
    src, _, y = make_seq_source(LENGTHS)
    mb = src.next_minibatch(6, input_map={"labels": src.streams.y, "ids": "id"})
    assert set(mb) == {"labels", "ids"}
    np.testing.assert_array_equal(mb["labels"].values, y[[0, 1]])
    mb2 = src.next_minibatch(6, num_data_partitions=2, partition_index=1)
    assert ids(mb2) == [3]                               # global [2, 3]; worker 1 owns index 3
    # the training driver's entry point
    assert ids(src._next(6, 1, 0)) == [4, 5]


# ---------------------------------------------------------------------------------------------
# workers
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3])
def test_workers_split_each_global_minibatch(n):
    sizes = [1, 4, 7, 2, 10, 3, 5, 30, 6, 1, 8]
    single, _, _ = make_seq_source(LENGTHS)
    workers = [make_seq_source(LENGTHS)[0] for _ in range(n)]
    seen_empty = False
    for k in sizes * 2:
        g = single.next_minibatch(k)
        g_ids = ids(g)
        parts = [w.next_minibatch(k, number_of_workers=n, worker_rank=r)
                 for r, w in enumerate(workers)]
        union = []
        for r, mb in enumerate(parts):
            assert mb != {}, "an empty worker minibatch is not the end"
            m = by_name(mb)
            mine = ids(mb)
            seen_empty |= not mine
            # ownership: the i-th sequence of a sweep belongs to worker i mod n
            assert all(i % n == r for i in mine)
            # local counts
            assert m["id"].num_sequences == m["x"].num_sequences == m["y"].num_sequences \
                == len(mine)
            assert m["x"].num_samples == sum(LENGTHS[i] for i in mine)
            assert m["y"].num_samples == len(mine)
            assert len(m["x"].lengths) == len(mine)
            assert m["x"].values.shape == (sum(LENGTHS[i] for i in mine), 3)
            assert m["x"].asarray().shape[0] == len(mine)
            # every worker reports the global minibatch's end_of_sweep
            assert m["x"].end_of_sweep == by_name(g)["x"].end_of_sweep
            # exactly its share of the global minibatch, in timeline order: so the workers'
            # minibatches are disjoint and their union is the single-worker minibatch
            assert mine == [i for i in g_ids if i % n == r]
            union.extend(mine)
        assert sorted(union) == sorted(g_ids)
        # every worker advanced to the same position
        states = {json.dumps(w.get_checkpoint_state(), sort_keys=True) for w in workers}
        assert states == {json.dumps(single.get_checkpoint_state(), sort_keys=True)}
    if n > 1:
        assert seen_empty                 # e.g. k=1: only one worker gets the sequence


def test_empty_worker_minibatch_shapes():
    src = MinibatchSourceFromData(dict(
        d=np.ones((4, 3), np.float64), s=sp.csr_matrix(np.eye(4, 5, dtype=np.float32)),
        q=[np.ones((2, 2))] * 4))
    mb = by_name(src.next_minibatch(1, number_of_workers=3, worker_rank=2))
    for name, dim in (("d", 3), ("s", 5), ("q", 2)):
        md = mb[name]
        assert md.num_sequences == 0 and md.num_samples == 0 and len(md) == 0
        assert md.dim == dim
        assert len(md.lengths) == 0 and md.as_sequences() == []
        assert md.mask.shape[0] == 0 and md.asarray().shape[0] == 0
    assert mb["d"].values.shape == (0, 3) and mb["d"].values.dtype == np.float64
    assert mb["s"].csr().shape == (0, 5) and len(mb["s"].values) == 0


def test_every_sequence_delivered_once_per_sweep_across_workers():
    n = 3
    workers = [MinibatchSourceFromData(dict(id=np.arange(11)), max_samples=FULL_DATA_SWEEP)
               for _ in range(n)]
    got = [[] for _ in range(n)]
    for _ in range(20):
        mbs = [w.next_minibatch(4, n, r) for r, w in enumerate(workers)]
        if not mbs[0]:
            assert all(mb == {} for mb in mbs)           # the end is the same call for all
            break
        for r, mb in enumerate(mbs):
            got[r].extend(int(v) for v in by_name(mb)["id"].values[:, 0])
    assert sorted(sum(got, [])) == list(range(11))
    assert got == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8]]


# ---------------------------------------------------------------------------------------------
# checkpoints
# ---------------------------------------------------------------------------------------------

def test_checkpoint_round_trip_continues_exactly():
    sizes = [5, 2, 9, 4, 13, 1, 7, 3]
    src, _, _ = make_seq_source(LENGTHS)
    for k in sizes[:3]:
        src.next_minibatch(k)
    state = src.get_checkpoint_state()
    assert set(state) >= {"position", "sequences", "samples_per_sweep"}
    assert state["position"] == state["minibatchSourcePosition"]
    assert state["sequences"] == len(LENGTHS) and state["samples_per_sweep"] == sum(LENGTHS)
    state = json.loads(json.dumps(state))                    # a plain JSON-able dict
    cont = [(ids(mb), by_name(mb)["x"].values.copy(), by_name(mb)["x"].end_of_sweep)
            for mb in (src.next_minibatch(k) for k in sizes)]
    fresh, _, _ = make_seq_source(LENGTHS)
    fresh.restore_from_checkpoint(state)
    assert fresh.get_checkpoint_state() == state
    for k, (want_ids, want_x, want_eos) in zip(sizes, cont):
        mb = fresh.next_minibatch(k)
        assert ids(mb) == want_ids
        np.testing.assert_array_equal(by_name(mb)["x"].values, want_x)
        assert by_name(mb)["x"].end_of_sweep == want_eos
    # the same source rewound; current_position is the same state; JSON strings accepted
    src.current_position = json.dumps(state)
    assert ids(src.next_minibatch(sizes[0])) == cont[0][0]


def test_restore_with_other_worker_count_and_mid_sequence_position():
    src, _, _ = make_seq_source(LENGTHS)
    src.next_minibatch(8)
    state = src.get_checkpoint_state()
    want = ids(src.next_minibatch(12))
    halves = []
    for r in range(2):
        w, _, _ = make_seq_source(LENGTHS)
        w.restore_from_checkpoint(state)
        halves.extend(ids(w.next_minibatch(12, 2, r)))
    assert sorted(halves) == sorted(want)
    # a position inside a sequence continues at the next sequence boundary
    src, _, _ = make_seq_source(LENGTHS)                     # starts 0 3 4 8 10 ...
    src.restore_from_checkpoint(dict(state, position=5, minibatchSourcePosition=5))
    assert src.get_checkpoint_state()["position"] == 8
    assert ids(src.next_minibatch(1)) == [3]
    src.restore_from_checkpoint(dict(state, position=sum(LENGTHS) * 3 - 1,
                                     minibatchSourcePosition=sum(LENGTHS) * 3 - 1))
    assert ids(src.next_minibatch(1)) == [0]


def test_restore_after_the_end_resumes():
    x = np.arange(6, dtype=np.float32).reshape(6, 1)
    src = MinibatchSourceFromData(dict(x=x), max_samples=FULL_DATA_SWEEP)
    src.next_minibatch(2)
    state = src.get_checkpoint_state()
    while src.next_minibatch(2):
        pass
    assert src.next_minibatch(2) == {}
    src.restore_from_checkpoint(state)
    assert src.next_minibatch(2)[src.streams.x].values[:, 0].tolist() == [2, 3]


def test_mismatched_state_raises():
    src, _, _ = make_seq_source(LENGTHS)
    src.next_minibatch(5)
    state = src.get_checkpoint_state()
    other, _, _ = make_seq_source(LENGTHS + [2])
    with pytest.raises(ctfio.StateError, match="sequences"):
        other.restore_from_checkpoint(state)
    other, _, _ = make_seq_source(LENGTHS[:-1] + [LENGTHS[-1] + 1])
    with pytest.raises(ctfio.StateError, match="samples_per_sweep"):
        other.restore_from_checkpoint(state)
    for bad in ({"cursor": 3, "total_num_samples": 5},       # CNTK's state
                dict(state, position=-1, minibatchSourcePosition=-1),
                dict(state, position=2), dict(state, version=99), "not json", 42):
        with pytest.raises(ctfio.StateError):
            src.restore_from_checkpoint(bad)
    # a failed restore leaves the source where it was
    assert src.get_checkpoint_state() == state


# ---------------------------------------------------------------------------------------------
# The seed notebook's user source (seeds/003), imports changed to ctfio, two bugs fixed
# ---------------------------------------------------------------------------------------------

import ctfio as C  # noqa: E402  (the notebook's `import cntk as C`)
from ctfio import MinibatchData, StreamInformation, UserMinibatchSource  # noqa: E402

sample_data = r'''0 |x 560:1 |y 1 0 0 0 0
0 |x 0:1
0 |x 0:1
1 |x 560:1 |y 0 1 0 0 0
1 |x 0:1
1 |x 0:1
1 |x 424:1
2 |x 160:1 |y 0 0 1 0 0
2 |x 5:1
2 |x 6:1
3 |x 460:1 |y 0 0 0 1 0
3 |x 3:1
3 |x 3:1
3 |x 425:1
'''


class MyMultiWorkerDataSource(UserMinibatchSource):
    # Copied from the notebook. Changes (and only these), in _prepare_nextbatch:
    #  1. `seq_id = self.sequences[self.sequences[self.next_seq_idx]]` (double indexing) became
    #     `seq_id = self.sequences[self.next_seq_idx]`;
    #  2. the `continue` that skips another worker's sequence is now preceded by
    #     `self.next_seq_idx += 1`: without it the loop looked at the same sequence forever
    #     (an infinite loop for every worker as soon as number_of_workers > 1).
    def __init__(self, f_dim, l_dim):
        self.f_dim, self.l_dim = f_dim, l_dim
        self._prepare_data()
        #setting the state
        self.fsi = StreamInformation("features", 0, 'sparse', np.float32, (self.f_dim,))
        self.lsi = StreamInformation("labels", 1, 'dense', np.float32, (self.l_dim,))
        self.sequences = sorted(self.data)
        self.next_seq_idx = 0
        super().__init__()

    def _prepare_data(self):
        """
        Parse the text and load the data into self.data.
        self.data is of the following structure:
        sequence id -> "features" -> list of features
        and
        sequence id -> "labels" -> label
        """
        self.data = {}
        for line in sample_data.split('\n'):
            line = line.strip()
            if not line:
                continue
            seq_id, data = line.split('|', 1)
            data = data.split("|")
            seq_id = int(seq_id.strip())

            if seq_id not in self.data:
                self.data[seq_id] = {'features': []}

            # Processing features - expecting one per line.
            features = data[0].split(" ")
            vocab_idx = int(features[1].split(":")[0])
            self.data[seq_id]['features'].append(vocab_idx)

            # Process label, if exists
            if len(data) == 2:
                labels = np.asarray([data[1].split(" ")[1:]], dtype=np.float32)
                self.data[seq_id]['labels'] = labels

    def _prepare_nextbatch(self, num_samples, number_of_workers, worker_rank):
        features = []
        labels = []
        sweep_end = False
        f_sample_count = l_sample_count = 0

        while max(f_sample_count, l_sample_count) < num_samples:
            if self.next_seq_idx == len(self.sequences):
                sweep_end = True
                self.next_seq_idx = 0

            seq_id = self.sequences[self.next_seq_idx]               # fix 1
            #Based on the worker rank, determines whether to add this
            #data in the batch: If the sequences doesn't belong to this
            #worker, skip it. In practice, this should be based on more
            #efficient mechanism: e.g. based on the location of the worker
            #and the data location
            if (seq_id % number_of_workers) != worker_rank:
                self.next_seq_idx += 1                               # fix 2
                continue
            feature_data = self.data[seq_id]['features']
            label_data = self.data[seq_id]['labels']
            if (features or labels) and \
                    max(f_sample_count+len(feature_data), \
                        l_sample_count+len(label_data)) > num_samples:
                break
            f_sample_count += len(feature_data)
            features.append(feature_data)

            l_sample_count += len(label_data)
            labels.append(label_data)

            self.next_seq_idx += 1
        return features, f_sample_count, labels, l_sample_count, sweep_end

    def stream_infos(self):
        """
        Override the stream_infos method of the base UserMinibatchSource class
        to provide stream meta information.
        """
        return [self.fsi, self.lsi]

    def next_minibatch(self, num_samples, number_of_workers, worker_rank, device):
        """
        Override the next_minibatch method of the base UserMinibatchSource class
        to provide minibatch data.
        """
        features, feature_sample_count, \
            labels, label_sample_count, sweep_end = self._prepare_nextbatch(num_samples,
                                                                            number_of_workers,
                                                                            worker_rank)
        feature_data = C.Value.one_hot(batch=features, num_classes=self.f_dim, device = device)
        label_data = C.Value(batch=np.asarray(labels, dtype=np.float32), device = device)
        num_seq = len(features)
        res = {
            self.fsi: MinibatchData(feature_data, num_seq, feature_sample_count, sweep_end),
            self.lsi: MinibatchData(label_data, num_seq, label_sample_count, sweep_end)
        }
        return res

    def get_checkpoint_state(self):
        return {'next_seq_idx': self.next_seq_idx}

    def restore_from_checkpoint(self, state):
        self.next_seq_idx = state['next_seq_idx']


SEED_FEATURES = {0: [560, 0, 0], 1: [560, 0, 0, 424], 2: [160, 5, 6], 3: [460, 3, 3, 425]}


def _seed_sequences(mb, mbs):
    """(sequence ids, checks) of a minibatch of MyMultiWorkerDataSource: identifies every
    sequence by its one-hot features and label and checks them."""
    f, lab = mb[mbs.fsi], mb[mbs.lsi]
    assert f.is_sparse and not lab.is_sparse
    fseqs, lseqs = f.as_sequences(), lab.as_sequences()
    assert len(fseqs) == len(lseqs) == f.num_sequences == lab.num_sequences
    out = []
    for fs, ls in zip(fseqs, lseqs):
        fs = fs.toarray() if hasattr(fs, "toarray") else np.asarray(fs)
        seq = int(np.argmax(ls[0]))                        # label y = one-hot sequence id
        np.testing.assert_array_equal(ls, np.eye(5, dtype=np.float32)[[seq]])
        np.testing.assert_array_equal(fs, np.eye(1000, dtype=np.float32)[SEED_FEATURES[seq]])
        out.append(seq)
    assert f.num_samples == sum(len(SEED_FEATURES[s]) for s in out)
    assert lab.num_samples == len(out)
    if out:
        pad = f.asarray()
        assert pad.shape == (len(out), max(len(SEED_FEATURES[s]) for s in out), 1000)
        for row, s in zip(pad, out):
            n = len(SEED_FEATURES[s])
            np.testing.assert_array_equal(row[:n], np.eye(1000)[SEED_FEATURES[s]])
            assert not row[n:].any()
        np.testing.assert_array_equal(f.mask.sum(axis=1), [len(SEED_FEATURES[s]) for s in out])
        np.testing.assert_array_equal(lab.asarray()[:, 0, :], np.eye(5)[out])
        assert f.csr().shape == (f.num_samples, 1000) and f.csr().nnz == f.num_samples
    return out


def test_seed_user_source_two_workers():
    input_dim, num_output_classes = 1000, 5
    workers = [MyMultiWorkerDataSource(input_dim, num_output_classes) for _ in range(2)]
    assert [si.name for si in workers[0].stream_infos()] == ["features", "labels"]
    assert workers[0].streams.features.storage_format == "sparse"
    got = [[], []]
    for _call in range(6):
        for r, w in enumerate(workers):
            # as the training driver calls it
            got[r].extend(_seed_sequences(w._next(7, 2, r, None), w))
    assert set(got[0]).isdisjoint(got[1])
    assert set(got[0]) | set(got[1]) == {0, 1, 2, 3}
    assert set(got[0]) == {0, 2} and set(got[1]) == {1, 3}
    # each worker cycles through its own sequences in order
    assert got[0][:4] == [0, 2, 0, 2] and got[1][:4] == [1, 3, 1, 3]


def test_seed_user_source_single_worker_and_checkpoint():
    mbs = MyMultiWorkerDataSource(1000, 5)
    first = _seed_sequences(mbs.next_minibatch(7, 1, 0, None), mbs)
    assert first == [0, 1]                                  # 3 + 4 = 7 samples
    state = mbs.get_checkpoint_state()
    cont = [_seed_sequences(mbs.next_minibatch(k, 1, 0, None), mbs) for k in (7, 3, 10, 4)]
    assert cont[0] == [2, 3]
    other = MyMultiWorkerDataSource(1000, 5)
    other.restore_from_checkpoint(state)
    assert [_seed_sequences(other.next_minibatch(k, 1, 0, None), other)
            for k in (7, 3, 10, 4)] == cont


def test_in_memory_source_worker_arguments_must_be_integers():
    src = MinibatchSourceFromData(dict(d=np.ones((4, 3), np.float32)))
    with pytest.raises(TypeError, match="must be an int"):
        src.next_minibatch(2, number_of_workers=2.5, worker_rank=0)
    with pytest.raises(TypeError, match="must be an int"):
        src.next_minibatch(2, number_of_workers=2, worker_rank=True)
    assert src.next_minibatch(2, number_of_workers=np.int64(2), worker_rank=1)

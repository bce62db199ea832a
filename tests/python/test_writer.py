"""write_ctf and sequence_to_cntk_text_format: exact CTF text, and round trips through the
reader (dense, sparse, sequences; float and double)."""
import io
import os

import numpy as np
import pytest
import scipy.sparse as sp

import ctfio
from ctfio import sequence_to_cntk_text_format, write_ctf
from ctfio import writer as writer_module

# ---------------------------------------------------------------------------------------------
# sequence_to_cntk_text_format: CNTK's outputs
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("idx, alias_tensor_map, expected", [
    (0, {"a": [[0, 1, 2]]}, "0\t|a 0 1 2"),
    (0, {"a": np.array([[0, 1, 2]])}, "0\t|a 0 1 2"),
    (2, {"a": [[0, 1, 2]], "b": [[3, 4, 5]]}, "2\t|a 0 1 2 |b 3 4 5"),
    (2, {"a": [[0, 1, 2], [0, 1, 2]], "b": [[3, 4, 5]]},
     "2\t|a 0 1 2 |b 3 4 5\n2\t|a 0 1 2"),
    (2, {"b": [[0, 1, 2]], "a": [[3, 4, 5], [3, 4, 5]]},
     "2\t|a 3 4 5 |b 0 1 2\n2\t|a 3 4 5"),
    (7, {"a": np.array([[0.5, 1.0]], dtype=np.float32)}, "7\t|a 0.5 1.0"),
    (1, {"a": np.zeros((2, 2, 2), dtype=np.int64)}, "1\t|a 0 0 0 0\n1\t|a 0 0 0 0"),
])
def test_sequence_conversion_dense(idx, alias_tensor_map, expected):
    assert sequence_to_cntk_text_format(idx, alias_tensor_map) == expected


@pytest.mark.parametrize("idx, alias_tensor_map, expected", [
    (0, {"a": [{3: 1, 6: 1}]}, "0\t|a 3:1 6:1"),
    (2, {"a": [{1: 1}], "b": [{1: 1}]}, "2\t|a 1:1 |b 1:1"),
    (5, {"a": [{1: 1}, {3: 1}], "b": [{1: 1}]}, "5\t|a 1:1 |b 1:1\n5\t|a 3:1"),
    (5, {"a": [{1: 1}, {3: 1}], "b": [{1: 1}, {2: 1}]}, "5\t|a 1:1 |b 1:1\n5\t|a 3:1 |b 2:1"),
    (0, {"a": [{6: 2.5, 3: 1}]}, "0\t|a 3:1 6:2.5"),
])
def test_sequence_conversion_sparse(idx, alias_tensor_map, expected):
    assert sequence_to_cntk_text_format(idx, alias_tensor_map) == expected


def test_sequence_conversion_scipy_and_mixed():
    labels = sp.csr_matrix(np.array([[0, 0, 1, 0]], dtype=np.int64))
    feats = np.array([[1, 2], [3, 4]])
    assert sequence_to_cntk_text_format(3, {"features": feats, "labels": labels}) == \
        "3\t|features 1 2 |labels 2:1\n3\t|features 3 4"
    m = sp.csr_matrix(([0.0, 7.0], ([0, 0], [1, 3])), shape=(1, 5))   # explicit zero dropped
    assert sequence_to_cntk_text_format(0, {"s": m}) == "0\t|s 3:7.0"


def test_sequence_conversion_errors_and_empty():
    with pytest.raises(ValueError):
        sequence_to_cntk_text_format(0, {})
    with pytest.raises(ValueError):
        sequence_to_cntk_text_format(0, {"a": "text"})
    with pytest.raises(ValueError):
        sequence_to_cntk_text_format(0, {"a": [["x", "y"]]})
    assert sequence_to_cntk_text_format(0, {"a": np.zeros((0, 3))}) == ""


def test_sequence_text_is_readable(tmp_path):
    path = tmp_path / "s.ctf"
    seqs = [{"x": np.arange(6, dtype=np.float32).reshape(3, 2) + i, "y": [{i % 4: 1}]}
            for i in range(5)]
    path.write_text("\n".join(sequence_to_cntk_text_format(i, m)
                              for i, m in enumerate(seqs)) + "\n")
    src = _source(str(path), x=2, y=4)
    mb = src.next_minibatch(100)
    x = mb[src.streams.x]
    assert x.num_sequences == 5 and x.num_samples == 15
    for i, s in enumerate(x.as_sequences()):
        np.testing.assert_array_equal(s, seqs[i]["x"])


# ---------------------------------------------------------------------------------------------
# write_ctf: text
# ---------------------------------------------------------------------------------------------

def _text(streams, **kw):
    f = io.StringIO()
    n = write_ctf(f, streams, **kw)
    return n, f.getvalue()


def test_write_text_dense_sparse_and_sequences():
    n, text = _text({
        "x": np.array([[0.1, 1, -0.0], [1e-30, 2.5, 3e20]]),
        "y": sp.csr_matrix(np.eye(2, 3)),
        "s": [np.arange(3).reshape(3, 1), np.ones((1, 1))],
    })
    assert n == 2
    assert text == ("0\t|x 0.1 1 -0 |y 0:1 |s 0\n"
                    "0\t|s 1\n"
                    "0\t|s 2\n"
                    "1\t|x 1e-30 2.5 3e+20 |y 1:1 |s 1\n")


def test_write_text_shortest_per_precision():
    _, f = _text({"v": np.array([[0.1, 1 / 3]])})
    _, d = _text({"v": np.array([[0.1, 1 / 3]])}, precision="double")
    assert f == "0\t|v 0.1 0.33333334\n"
    assert d == "0\t|v 0.1 0.3333333333333333\n"


def test_write_line_mode_ids_and_empty_samples():
    _, text = _text({"a": np.array([[1.5], [2]])}, sequence_ids=False)
    assert text == "|a 1.5\n|a 2\n"
    _, text = _text({"a": np.array([[1], [2]])}, sequence_ids=[7, 3])
    assert text == "7\t|a 1\n3\t|a 2\n"
    _, text = _text({"a": sp.csr_matrix((2, 5)), "b": np.array([1, 2])})
    assert text == "0\t|a |b 1\n1\t|a |b 2\n"


@pytest.mark.parametrize("streams, kw, msg", [
    ({"a": np.zeros((2, 1)), "b": np.zeros((3, 1))}, {}, "same number of sequences"),
    ({"a": np.array([[np.nan]])}, {}, "NaN or infinity"),
    ({"a": sp.csr_matrix(np.array([[np.inf]]))}, {}, "NaN or infinity"),
    ({"a b": np.zeros((1, 1))}, {}, "not a valid CTF alias"),
    ({"a|": np.zeros((1, 1))}, {}, "not a valid CTF alias"),
    ({"a": [np.zeros((2, 1))]}, {"sequence_ids": False}, "one line per sequence"),
    ({"a": np.zeros((2, 1))}, {"sequence_ids": [1, 1]}, "share the id"),
    ({"a": np.zeros((2, 1))}, {"sequence_ids": [1]}, "1 ids for 2 sequences"),
    ({"a": [np.zeros((1, 2)), np.zeros((1, 3))]}, {}, "different dimensions"),
    ({"a": [np.zeros((0, 2))]}, {}, "no sample in any stream"),
    ({"a": np.zeros((1, 1))}, {"precision": "half"}, "precision"),
    ({}, {}, "at least one stream"),
])
def test_write_errors(streams, kw, msg, tmp_path):
    with pytest.raises(ValueError, match=msg):
        write_ctf(str(tmp_path / "bad.ctf"), streams, **kw)
    assert os.listdir(tmp_path) == []      # nothing left behind


def test_chunked_output_is_identical(monkeypatch):
    rng = np.random.RandomState(5)
    streams = {"x": [rng.randn(rng.randint(1, 6), 3) for _ in range(200)],
               "y": sp.random(200, 9, density=0.3, random_state=1, format="csr")}
    _, whole = _text(streams)
    monkeypatch.setattr(writer_module, "_CHUNK_SAMPLES", 7)
    writes = []

    class Sink(io.StringIO):
        def write(self, s):
            writes.append(len(s))
            return super().write(s)

    f = Sink()
    write_ctf(f, streams)
    assert f.getvalue() == whole
    assert len(writes) > 50


# ---------------------------------------------------------------------------------------------
# write_ctf: round trips through the reader
# ---------------------------------------------------------------------------------------------

def _source(path, precision="float", **dims):
    defs = {}
    for name, dim in dims.items():
        sparse = name.startswith("y") or name.startswith("sp")
        defs[name] = ctfio.StreamDef(field=name, shape=dim, is_sparse=sparse)
    return ctfio.MinibatchSource(ctfio.CTFDeserializer(path, ctfio.StreamDefs(**defs)),
                                 randomize=False, max_sweeps=1, precision=precision)


def _values(dtype, shape, seed):
    rng = np.random.RandomState(seed)
    v = rng.randn(*shape) * 10.0 ** rng.randint(-30, 30, size=shape)
    v[0, :] = [0, -0.0, 1, -7, 123456789, 0.1, 1e-38, 3.4e38][:shape[1]]
    return v.astype(dtype)


@pytest.mark.parametrize("precision, dtype", [("float", np.float32), ("double", np.float64)])
def test_round_trip_dense_and_sparse(tmp_path, precision, dtype):
    path = str(tmp_path / "rt.ctf")
    x = _values(dtype, (300, 8), 1)
    y = sp.random(300, 50, density=0.05, random_state=2, format="csr", dtype=np.float64)
    y.data = (y.data * 1000 - 500).astype(dtype)
    y = y.astype(dtype)
    assert write_ctf(path, {"x": x, "y": y}, precision=precision) == 300
    src = _source(path, precision=precision, x=8, y=50)
    mb = src.next_minibatch(10 ** 6)
    xs, ys = mb[src.streams.x], mb[src.streams.y]
    assert xs.values.dtype == dtype and xs.num_sequences == 300
    np.testing.assert_array_equal(xs.values, x)
    assert np.array_equal(np.signbit(xs.values), np.signbit(x))
    got = ys.csr()
    assert (got != y.astype(got.dtype)).nnz == 0
    assert got.nnz == y.nnz
    np.testing.assert_array_equal(xs.keys, np.arange(300))


def test_round_trip_float64_data_as_float(tmp_path):
    # float64 data written with precision="float" reads back as its float32 rounding
    path = str(tmp_path / "f.ctf")
    x = np.random.RandomState(3).randn(50, 4)
    write_ctf(path, {"x": x})
    src = _source(path, x=4)
    np.testing.assert_array_equal(src.next_minibatch(1000)[src.streams.x].values,
                                  x.astype(np.float32))


def test_round_trip_sequences(tmp_path):
    path = str(tmp_path / "seq.ctf")
    rng = np.random.RandomState(4)
    lengths = rng.randint(1, 9, size=60)
    x = [rng.randn(n, 5).astype(np.float32) for n in lengths]
    labels = rng.randint(0, 7, size=60)
    y = [sp.csr_matrix(np.eye(7, dtype=np.float32)[[c]]) for c in labels]      # one per seq
    sp_seq = [sp.random(n, 30, density=0.2, random_state=i, format="csr", dtype=np.float32)
              for i, n in enumerate(lengths)]
    write_ctf(path, {"x": x, "y": y, "sp": sp_seq}, sequence_ids=list(range(100, 160)))
    src = _source(path, x=5, y=7, sp=30)
    mb = src.next_minibatch(10 ** 6)
    xs, ys, ss = mb[src.streams.x], mb[src.streams.y], mb[src.streams.sp]
    assert xs.num_sequences == 60 and xs.num_samples == lengths.sum()
    assert ys.num_samples == 60
    np.testing.assert_array_equal(xs.keys, np.arange(100, 160))
    for a, b in zip(xs.as_sequences(), x):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ys.csr().toarray().argmax(axis=1), labels)
    got = ss.csr().toarray()
    np.testing.assert_array_equal(got, sp.vstack(sp_seq).toarray())


def test_round_trip_line_mode_3d_and_pathlike(tmp_path):
    path = tmp_path / "lm.ctf"
    x = np.arange(24, dtype=np.float32).reshape(4, 3, 2)     # 4 sequences of 3 samples
    write_ctf(path, {"x": x})
    src = _source(str(path), x=2)
    seqs = src.next_minibatch(100)[src.streams.x].as_sequences()
    np.testing.assert_array_equal(np.stack(seqs), x)
    write_ctf(path, {"x": np.arange(5.0)}, sequence_ids=False)
    assert path.read_text() == "|x 0\n|x 1\n|x 2\n|x 3\n|x 4\n"
    src = _source(str(path), x=1)
    np.testing.assert_array_equal(src.next_minibatch(100)[src.streams.x].values.ravel(),
                                  np.arange(5.0))

"""Arrays without copies: ``.values``, ``asarray()`` (when there is no padding), ``csr()``, the
torch tensors and the provider's arrays share the memory the data already lives in."""

import numpy as np
import pytest

import ctfio
from ctfio import _ctfio
from ctfio.provider import (
    dense_vector,
    dense_vector_sequence,
    integer_value,
    provider,
    sparse_vector,
)


def write(tmp_path, lines, name="d.ctf"):
    path = str(tmp_path / name)
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    return path


def source(path, frame_mode=False, **kw):
    return ctfio.MinibatchSource(ctfio.CTFDeserializer(path, ctfio.StreamDefs(
        x=ctfio.StreamDef(shape=3), y=ctfio.StreamDef(shape=6, is_sparse=True))),
        randomize=False, frame_mode=frame_mode, **kw)


def base_chain(a):
    """The objects behind a NumPy array, innermost last (through memoryviews too)."""
    out = []
    while a is not None:
        out.append(a)
        a = a.base if isinstance(a, np.ndarray) else a.obj if isinstance(a, memoryview) \
            else None
    return out


def is_reader_memory(a):
    return isinstance(a, np.ndarray) and not a.flags.owndata and \
        any(isinstance(b, _ctfio.Buffer) for b in base_chain(a))


@pytest.fixture
def one_sample_file(tmp_path):
    return write(tmp_path, ["%d |x %d 1 2 |y %d:1" % (i, i, i % 6) for i in range(20)])


@pytest.fixture
def fixed_length_file(tmp_path):
    return write(tmp_path, ["%d |x %d %d 0 |y %d:2" % (i // 3, i // 3, i % 3, i % 6)
                            for i in range(30)])


@pytest.mark.parametrize("frame_mode", [False, True])
def test_values_and_asarray_are_views_without_padding(one_sample_file, frame_mode):
    src = source(one_sample_file, frame_mode=frame_mode)
    md = src.next_minibatch(8)[src.streams.x]
    assert is_reader_memory(md.values)
    a = md.asarray()
    assert np.shares_memory(a, md.values) and is_reader_memory(a)
    assert a.shape == ((8, 3) if frame_mode else (8, 1, 3))
    np.testing.assert_array_equal(a.reshape(8, 3)[:, 0], np.arange(8))


def test_fixed_length_sequences_asarray_is_a_view(fixed_length_file):
    src = source(fixed_length_file)
    md = src.next_minibatch(9)[src.streams.x]
    a = md.asarray()
    assert a.shape == (3, 3, 3) and np.shares_memory(a, md.values)
    np.testing.assert_array_equal(a[:, :, 0], [[0] * 3, [1] * 3, [2] * 3])


def test_padded_asarray_copies_and_says_so(tmp_path):
    path = write(tmp_path, ["0 |x 1 1 1", "0 |x 2 2 2", "1 |x 3 3 3"])
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer(path, ctfio.StreamDefs(
        x=ctfio.StreamDef(shape=3))), randomize=False)
    md = src.next_minibatch(3)[src.streams.x]
    a = md.asarray()
    assert a.shape == (2, 2, 3) and not np.shares_memory(a, md.values)
    assert "copy" in type(md).asarray.__doc__


def test_sparse_csr_shares_the_reader_buffers(one_sample_file):
    pytest.importorskip("scipy")
    src = source(one_sample_file)
    md = src.next_minibatch(8)[src.streams.y]
    m = md.csr()
    assert np.shares_memory(m.data, md.values) and is_reader_memory(m.data)
    assert np.shares_memory(m.indices, md.indices)
    # SciPy wants one index dtype: indptr (num_samples + 1 entries) becomes int32, documented
    assert "indptr" in type(md).csr.__doc__


def test_in_memory_values_are_not_rebuilt_per_access():
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    seqs = [np.full((3, 2), k, np.float32) for k in range(10)]
    src = ctfio.MinibatchSourceFromData(dict(x=x, s=seqs))
    mb = src.next_minibatch(12)
    mx, ms = mb[src.streams.x], mb[src.streams.s]
    assert mx.values is mx.values and ms.values is ms.values   # one array, every access
    assert np.shares_memory(mx.asarray(), mx.values)           # one-sample sequences: a view
    assert np.shares_memory(ms.asarray(), ms.values)           # fixed length 3: a view
    parts = ms.as_sequences()
    assert all(np.shares_memory(p, ms.values) for p in parts)


def test_torch_tensors_share_the_reader_buffers(one_sample_file, fixed_length_file):
    torch = pytest.importorskip("torch")
    ct = pytest.importorskip("ctfio.torch")
    for path, layout in ((one_sample_file, "packed"), (fixed_length_file, "padded")):
        ds = ct.CTFIterableDataset(source(path), 9, layout=layout)
        batch = next(iter(ds))
        mb = {si.name: md for si, md in ds.last_minibatch.items()}
        assert batch["x"].data_ptr() == mb["x"].values.ctypes.data
        assert batch["y"].values().data_ptr() == mb["y"].values.ctypes.data
        assert batch["y"].col_indices().data_ptr() == mb["y"].indices.ctypes.data
        assert isinstance(batch["x"], torch.Tensor)


def test_provider_arrays_are_views_of_the_packed_batch():
    @provider(input_types={"d": dense_vector(3), "q": dense_vector_sequence(2),
                           "s": sparse_vector(5), "i": integer_value(10)},
              should_shuffle=False)
    def process(settings, filename):
        for k in range(6):
            yield {"d": [k, k, k], "q": [[k, 0], [k, 1]], "s": [(k % 5, 1.5)], "i": k}

    (b,) = list(process(["f"], batch_size=6))
    for name in ("d", "q", "s", "i"):
        pd = b[name]
        chain = base_chain(pd.value)
        assert not pd.value.flags.owndata and isinstance(chain[-1], (bytes, bytearray))
        assert np.shares_memory(pd.values, pd.value)
    assert np.shares_memory(b["d"].asarray(), b["d"].value)        # frame layout: the block
    assert np.shares_memory(b["q"].asarray(), b["q"].value)        # equal lengths: a view
    assert np.shares_memory(b["s"].indices, b["s"].csr().indices)


def test_torch_staged_path_equals_the_zero_copy_path(one_sample_file):
    """The CUDA staging code (two host buffers, copies, CSR parts travelling apart) run on the
    CPU: the batches equal the zero-copy ones, and the staging buffers alternate."""
    torch = pytest.importorskip("torch")
    ct = pytest.importorskip("ctfio.torch")
    from ctfio import _staging
    plain = [b for _, b in zip(range(4), ct.CTFIterableDataset(source(one_sample_file), 5))]
    ds = ct.CTFIterableDataset(source(one_sample_file), 5)
    tr = ct._Transfer("cpu")
    tr.passthrough, tr.staging = False, _staging.Staging("cpu", copy_on_cpu=True)
    addrs = []
    for i, mb in zip(range(4), iter(lambda: ds.source.next_minibatch(5), None)):
        batch = {}
        for si, md in mb.items():
            if md.is_sparse:
                ct._sparse(md, si.name, False, batch)
            else:
                ct._dense(md, si.name, "packed", False, batch)
        out = tr.finish(tr.start(batch))   # valid until the batch after next reuses its side
        addrs.append(out["x"].data_ptr())
        assert set(out) == set(plain[i])
        for k, want in plain[i].items():
            have = out[k]
            if want.layout == torch.sparse_csr:
                want, have = want.to_dense(), have.to_dense()
            assert torch.equal(want, have), k
    assert addrs[0] == addrs[2] and addrs[1] == addrs[3] and addrs[0] != addrs[1]


def test_reader_arrays_are_views_and_the_docstrings_say_when_they_copy(one_sample_file):
    src = source(one_sample_file)
    mb = src.next_minibatch(8)
    mx, my = mb[src.streams.x], mb[src.streams.y]
    for a in (mx.values, mx.lengths, mx.keys, my.values, my.lengths, my.indptr, my.indices):
        assert is_reader_memory(a) and not a.flags.writeable
    assert mx.values is mx.values and my.indptr is my.indptr       # wrapped once
    assert mx.indptr is None and mx.indices is None                # dense: no CSR parts
    assert my.lengths.dtype == np.uint32 and my.indptr.dtype == np.int64
    assert my.indices.dtype == np.int32 and mx.keys.dtype == np.uint64
    sparse_dense = my.asarray()                                    # sparse -> dense: a copy
    assert sparse_dense.shape == (8, 1, 6) and not np.shares_memory(sparse_dense, my.values)
    doc = type(mx)
    assert "no copy" in doc.values.__doc__ and "copy" in doc.asarray.__doc__
    assert "no copy" in doc.csr.__doc__ and "a copy" in doc.csr.__doc__
    assert "no copy" in doc.lengths.__doc__


def test_dense_csr_is_a_copy(one_sample_file):
    pytest.importorskip("scipy")
    src = source(one_sample_file)
    md = src.next_minibatch(8)[src.streams.x]
    m = md.csr()
    assert m.shape == (8, 3) and not np.shares_memory(m.data, md.values)
    np.testing.assert_array_equal(m.toarray(), md.values)


def _ptr(a):
    return a.__array_interface__["data"][0]


def test_held_arrays_keep_their_data_while_later_minibatches_are_read(tmp_path):
    """The reader reuses the memory of a minibatch nobody refers to any more (the next one
    lands in the same blocks), never that of one whose arrays are still held."""
    path = write(tmp_path, ["%d |x %d %d %d |y %d:%d" % (i, i, 2 * i, 3 * i, i % 6, i)
                            for i in range(200)])
    src = source(path)
    sx, sy = src.streams.x, src.streams.y
    first = src.next_minibatch(10)
    held = {"x": first[sx].values, "x_len": first[sx].lengths, "keys": first[sx].keys,
            "y": first[sy].values, "y_ind": first[sy].indices, "y_ptr": first[sy].indptr}
    want = {k: v.copy() for k, v in held.items()}
    del first
    # A minibatch dropped entirely: a later one is packed into its blocks (the next one, or,
    # when that was read ahead while this one was held, the one after it).
    mb = src.next_minibatch(10)
    dropped = _ptr(mb[sx].values)
    del mb
    later = []
    for _ in range(2):
        mb = src.next_minibatch(10)
        later.append(_ptr(mb[sx].values))
        del mb
    assert dropped in later
    for _ in range(60):                # past the end of the sweep: the same data comes back
        mb = src.next_minibatch(10)
        assert _ptr(mb[sx].values) != _ptr(held["x"])
        del mb
    for k, v in held.items():
        np.testing.assert_array_equal(v, want[k], err_msg=k)
    np.testing.assert_array_equal(want["x"][:, 0], np.arange(10))
    src.close()                        # the reader goes, the arrays stay
    for k, v in held.items():
        np.testing.assert_array_equal(v, want[k], err_msg=k)


def test_held_torch_tensors_keep_their_data(tmp_path):
    torch = pytest.importorskip("torch")
    ct = pytest.importorskip("ctfio.torch")
    path = write(tmp_path, ["%d |x %d 1 2 |y %d:1" % (i, i, i % 6) for i in range(100)])
    ds = ct.CTFIterableDataset(source(path), 10, epoch_size=ctfio.INFINITELY_REPEAT)
    it = iter(ds)
    first = next(it)
    x, y = first["x"], first["y"]
    want_x, want_y = x.clone(), y.to_dense()
    del first
    ds.last_minibatch = None
    for _ in range(40):
        next(it)
    assert torch.equal(x, want_x) and torch.equal(y.to_dense(), want_y)
    assert x[:, 0].tolist() == list(range(10))


def test_torch_padded_copies_only_for_unequal_lengths(tmp_path):
    pytest.importorskip("torch")
    ct = pytest.importorskip("ctfio.torch")
    path = write(tmp_path, ["0 |x 1 1 1", "0 |x 2 2 2", "1 |x 3 3 3", "2 |x 4 4 4"])
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer(path, ctfio.StreamDefs(
        x=ctfio.StreamDef(shape=3))), randomize=False)
    ds = ct.CTFIterableDataset(src, 4, layout="padded")
    batch = next(iter(ds))
    md = next(iter(ds.last_minibatch.values()))
    assert batch["x"].shape == (3, 2, 3)
    assert batch["x"].data_ptr() != md.values.ctypes.data       # padding: the one copy
    assert "copy" in ct._dense.__doc__ and "no copy" in ct._sparse.__doc__

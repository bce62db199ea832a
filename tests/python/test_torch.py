"""ctfio.torch in one process (rules 7-10, docs/torch.md): zero-copy tensors, layouts, epochs,
state_dict round trips, DataLoader wrapping, worker detection and the device path on CPU.
Multi-process runs are in test_torchrun.py. Skipped when torch is not installed."""

import gc
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import ctfio  # noqa: E402
import ctfio.torch as ct  # noqa: E402
from ctfio import INFINITELY_REPEAT  # noqa: E402

NUM_SEQS = 30


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

def write_data(path, n=NUM_SEQS, seed=7, lengths=(1, 4)):
    """n sequences of lengths[0]..lengths[1] samples: dense x (dim 3), one sparse label y (dim 5)
    per sequence, sometimes with two non-zeros."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for s in range(n):
            for i in range(rng.randint(*lengths)):
                line = "%d |x %s" % (s, " ".join("%.2f" % rng.uniform(-1, 1) for _ in range(3)))
                if i == 0:
                    label = rng.randrange(5)
                    line += " |y %d:1" % label
                    if s % 3 == 0:
                        line += " %d:0.5" % ((label + 1 + rng.randrange(4)) % 5)
                f.write(line + "\n")
    return path


@pytest.fixture
def data(tmp_path):
    return write_data(str(tmp_path / "data.ctf"))


def make_source(path, randomize=True, **kw):
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(path, ctfio.StreamDefs(
            x=ctfio.StreamDef(shape=3), y=ctfio.StreamDef(shape=5, is_sparse=True))),
        randomize=randomize, randomization_seed=2, randomization_window_in_chunks=3,
        chunk_size_in_bytes=200, num_threads=1, **kw)


def factory(path, **kw):
    return lambda: make_source(path, **kw)


def keys_of(batches):
    return [b["_keys"].tolist() for b in batches]


def take(it, n):
    out = []
    for i, b in enumerate(it):
        out.append(b)
        if i + 1 == n:
            break
    return out


def same_batch(a, b):
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if x.layout == torch.sparse_csr:
            x, y = x.to_dense(), y.to_dense()
        assert torch.equal(x, y), k


# ---------------------------------------------------------------------------------------------
# import, construction
# ---------------------------------------------------------------------------------------------

def test_import_ctfio_does_not_import_torch():
    code = "import sys, ctfio; assert 'torch' not in sys.modules; print('ok')"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
    assert "torch" not in ctfio.__all__ and not hasattr(ctfio, "CTFIterableDataset")


def test_is_an_iterable_dataset_and_validates_arguments(data):
    ds = ct.CTFIterableDataset(factory(data), 8)
    assert isinstance(ds, torch.utils.data.IterableDataset)
    assert "CTFIterableDataset(" in repr(ds)
    with pytest.raises(ValueError, match="minibatch_size"):
        ct.CTFIterableDataset(factory(data), 0)
    with pytest.raises(ValueError, match="layout"):
        ct.CTFIterableDataset(factory(data), 8, layout="ragged")
    with pytest.raises(ValueError, match="epoch_size"):
        ct.CTFIterableDataset(factory(data), 8, epoch_size=0)
    with pytest.raises(TypeError, match="source"):
        ct.CTFIterableDataset(42, 8)
    with pytest.raises(KeyError, match="no stream 'z'"):
        next(iter(ct.CTFIterableDataset(factory(data), 8, streams=["z"])))


# ---------------------------------------------------------------------------------------------
# tensors: zero copy, layouts
# ---------------------------------------------------------------------------------------------

def test_tensors_share_memory_with_the_minibatch(data):
    ds = ct.CTFIterableDataset(factory(data), 16)
    batch = next(iter(ds))
    mb = {si.name: md for si, md in ds.last_minibatch.items()}
    x, y = mb["x"], mb["y"]
    assert batch["x"].data_ptr() == x.values.ctypes.data            # dense values
    assert batch["x"].shape == (x.num_samples, 3) and batch["x"].dtype == torch.float32
    assert batch["y"].layout == torch.sparse_csr
    assert batch["y"].values().data_ptr() == y.values.ctypes.data   # sparse values
    assert batch["y"].col_indices().data_ptr() == y.indices.ctypes.data
    assert batch["y"].col_indices().dtype == torch.int32
    assert batch["y"].crow_indices().tolist() == y.indptr.tolist()
    assert batch["x_lengths"].tolist() == x.lengths.tolist()
    assert batch["y_lengths"].tolist() == y.lengths.tolist()
    np.testing.assert_array_equal(batch["x"].numpy(), x.values)
    np.testing.assert_array_equal(batch["y"].to_dense().numpy(), y.csr().toarray())
    # The tensors keep the minibatch alive on their own: after everything else is gone (and a
    # collection), they still hold the minibatch's values.
    expect = x.values.copy()
    del ds, mb, x, y
    gc.collect()
    np.testing.assert_array_equal(batch["x"].numpy(), expect)


def test_padded_layout_and_mask(data):
    ds = ct.CTFIterableDataset(factory(data), 16, layout="padded")
    for i, batch in enumerate(ds):
        if i == 3:
            break
        mb = {si.name: md for si, md in ds.last_minibatch.items()}
        np.testing.assert_array_equal(batch["x"].numpy(), mb["x"].asarray())
        np.testing.assert_array_equal(batch["x_mask"].numpy(), mb["x"].mask.astype(bool))
        assert batch["x_mask"].dtype == torch.bool
        assert "x_lengths" not in batch and "y_lengths" in batch


def test_padded_equal_lengths_is_a_view(tmp_path):
    path = write_data(str(tmp_path / "d.ctf"), lengths=(2, 2))
    ds = ct.CTFIterableDataset(factory(path), 8, layout="padded")
    batch = next(iter(ds))
    mb = {si.name: md for si, md in ds.last_minibatch.items()}
    assert batch["x"].shape == (4, 2, 3)
    assert batch["x"].data_ptr() == mb["x"].values.ctypes.data
    assert bool(batch["x_mask"].all())


def test_frame_mode(tmp_path):
    path = write_data(str(tmp_path / "d.ctf"), lengths=(1, 1))
    ds = ct.CTFIterableDataset(lambda: make_source(path, frame_mode=True), 8)
    batch = next(iter(ds))
    assert set(batch) == {"x", "y"}
    assert batch["x"].shape == (8, 3) and batch["y"].shape == (8, 5)


def test_streams_subset_and_double_precision(data):
    ds = ct.CTFIterableDataset(lambda: make_source(data, precision="double"), 8, streams=["x"])
    batch = next(iter(ds))
    assert set(batch) == {"x", "x_lengths"} and batch["x"].dtype == torch.float64


def test_contents_equal_the_source(data):
    """Same requests, same minibatches as calling the source directly."""
    ds = ct.CTFIterableDataset(factory(data), 10, epoch_size=INFINITELY_REPEAT, with_keys=True)
    src = make_source(data)
    for batch in take(ds, 12):
        mb = {si.name: md for si, md in src.next_minibatch(10).items()}
        assert batch["_keys"].tolist() == mb["x"].keys.tolist()
        np.testing.assert_array_equal(batch["x"].numpy(), mb["x"].values)
        np.testing.assert_array_equal(batch["y"].to_dense().numpy(), mb["y"].csr().toarray())


# ---------------------------------------------------------------------------------------------
# epochs
# ---------------------------------------------------------------------------------------------

def test_epoch_is_one_sweep_and_iterations_continue(data):
    ds = ct.CTFIterableDataset(factory(data), 16, with_keys=True)
    seen = []
    for epoch in range(3):
        assert ds.epoch == epoch
        keys = [k for b in ds for k in b["_keys"].tolist()]
        assert sorted(keys) == list(range(NUM_SEQS))
        seen.append(keys)
    assert ds.epoch == 3
    assert seen[0] != seen[1]                     # each sweep in its own order
    per = ds.state_dict()["source"]["samples_per_sweep"]
    assert ds.state_dict()["source"]["minibatchSourcePosition"] == 3 * per


def test_integer_epoch_size_cuts_requests(data):
    ds = ct.CTFIterableDataset(factory(data), 16, epoch_size=40)
    for epoch in range(3):
        list(ds)
        pos = ds.state_dict()["source"]["minibatchSourcePosition"]
        assert 40 * (epoch + 1) <= pos < 40 * (epoch + 1) + 4     # one sequence may overshoot


def test_end_of_data_ends_iteration(data):
    ds = ct.CTFIterableDataset(lambda: make_source(data, max_sweeps=1), 16,
                               epoch_size=INFINITELY_REPEAT, with_keys=True)
    assert sorted(k for b in ds for k in b["_keys"].tolist()) == list(range(NUM_SEQS))
    assert list(ds) == []


# ---------------------------------------------------------------------------------------------
# checkpoints
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["packed", "padded"])
def test_state_dict_round_trip_equals_uninterrupted_run(data, layout):
    def run(ds, epochs):
        return [b for _ in range(epochs) for b in ds]

    full = run(ct.CTFIterableDataset(factory(data), 12, layout=layout, with_keys=True), 3)
    a = ct.CTFIterableDataset(factory(data), 12, layout=layout, with_keys=True)
    first = take(a, 7)                                  # 7 steps into the first epoch
    state = json.loads(json.dumps(a.state_dict()))      # JSON-safe
    assert state["batches"] == 7 and state["epoch"] == 0
    b = ct.CTFIterableDataset(factory(data), 12, layout=layout, with_keys=True)
    b.load_state_dict(state)
    assert b.state_dict()["source"] == state["source"]
    rest = [x for _ in range(3) for x in b]             # finishes epoch 0, then 2 more
    assert b.epoch == 3
    got = first + rest
    assert len(got) == len(full)
    for x, y in zip(got, full):
        same_batch(x, y)


def test_break_rewinds_the_batch_read_ahead(data):
    full = keys_of(take(ct.CTFIterableDataset(factory(data), 8, with_keys=True,
                                              epoch_size=INFINITELY_REPEAT), 10))
    ds = ct.CTFIterableDataset(factory(data), 8, with_keys=True, epoch_size=INFINITELY_REPEAT)
    got = keys_of(take(ds, 3)) + keys_of(take(ds, 4)) + keys_of(take(ds, 3))
    assert got == full


def test_state_is_the_position_after_the_last_batch_handed_out(data):
    ds = ct.CTFIterableDataset(factory(data), 8, epoch_size=INFINITELY_REPEAT)
    src = make_source(data)
    it = iter(ds)
    for _ in range(5):
        next(it)
        src.next_minibatch(8)
        # the dataset already read the next batch; its state must not count it
        assert ds.state_dict()["source"] == src.get_checkpoint_state()


def test_state_survives_torch_save(data, tmp_path):
    ds = ct.CTFIterableDataset(factory(data), 8, with_keys=True)
    take(ds, 4)
    torch.save({"data": ds.state_dict()}, str(tmp_path / "c.pt"))
    state = torch.load(str(tmp_path / "c.pt"))["data"]      # weights_only load
    b = ct.CTFIterableDataset(factory(data), 8, with_keys=True)
    b.load_state_dict(state)
    assert keys_of(take(b, 3)) == keys_of(take(ds, 3))


def test_restore_with_another_minibatch_size_and_a_bare_source_state(data):
    a = ct.CTFIterableDataset(factory(data), 8, with_keys=True, epoch_size=INFINITELY_REPEAT)
    take(a, 3)
    rest = [k for x in take(a, 6) for k in x["_keys"].tolist()]
    b = ct.CTFIterableDataset(factory(data), 24, with_keys=True, epoch_size=INFINITELY_REPEAT)
    b.load_state_dict(_state_after(data, 3))           # what source.get_checkpoint_state() gave
    got = [k for x in take(b, 2) for k in x["_keys"].tolist()]
    n = min(len(got), len(rest))
    assert n > 4 and got[:n] == rest[:n]                # the same timeline, cut differently


def _state_after(data, steps):
    src = make_source(data)
    for _ in range(steps):
        src.next_minibatch(8)
    return src.get_checkpoint_state()      # a bare source state


def test_state_for_other_data_is_a_state_error(data, tmp_path):
    other = write_data(str(tmp_path / "other.ctf"), n=12, seed=1)
    state = ct.CTFIterableDataset(factory(data), 8).state_dict()
    ds = ct.CTFIterableDataset(factory(other), 8)
    ds.load_state_dict(state)
    with pytest.raises(ctfio.StateError):
        next(iter(ds))
    with pytest.raises(ValueError, match="version"):
        ds.load_state_dict({"version": 99, "source": {}})


# ---------------------------------------------------------------------------------------------
# DataLoader
# ---------------------------------------------------------------------------------------------

def test_dataloader_without_workers_equals_direct_iteration(data):
    ref = ct.CTFIterableDataset(factory(data), 16, with_keys=True)
    direct = [b for _ in range(2) for b in ref]
    ds = ct.CTFIterableDataset(factory(data), 16, with_keys=True)
    dl = torch.utils.data.DataLoader(ds, batch_size=None)
    via = [b for _ in range(2) for b in dl]
    assert len(via) == len(direct)
    for x, y in zip(via, direct):
        same_batch(x, y)
    assert ds.epoch == 2 and ds.state_dict()["batches"] == len(direct)


def test_dataloader_two_workers_covers_every_sequence_once(data):
    ref = ct.CTFIterableDataset(factory(data), 16, with_keys=True)
    ds = ct.CTFIterableDataset(factory(data), 16, with_keys=True)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                     persistent_workers=True)
    for _epoch in range(2):
        got = [b for b in dl]
        want = [b for b in ref]
        assert len(got) == 2 * len(want)
        keys = [k for b in got for k in b["_keys"].tolist()]
        assert sorted(keys) == list(range(NUM_SEQS))
        # Loader workers take turns; worker w holds share w of each global minibatch.
        for i, w in enumerate(want):
            pair = got[2 * i]["_keys"].tolist() + got[2 * i + 1]["_keys"].tolist()
            assert sorted(pair) == sorted(w["_keys"].tolist())
        assert got[0]["y"].layout == torch.sparse_csr


def test_a_file_source_instance_is_refused_in_worker_processes(data):
    ds = ct.CTFIterableDataset(make_source(data), 16)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1)
    with pytest.raises(RuntimeError, match="callable"):
        list(dl)


def test_user_source_instance_works_with_workers():
    sp = pytest.importorskip("scipy.sparse")
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    y = sp.csr_matrix(np.eye(4, dtype=np.float32)[np.arange(20) % 4])
    src = ctfio.MinibatchSourceFromData(dict(x=x, y=y))
    dl = torch.utils.data.DataLoader(ct.CTFIterableDataset(src, 6), batch_size=None,
                                     num_workers=2)
    rows = torch.cat([b["x"] for b in dl])
    assert sorted(rows[:, 0].tolist()) == x[:, 0].tolist()
    # and directly: dense rows, sparse CSR, one epoch = one sweep
    batches = list(ct.CTFIterableDataset(src, 6))
    assert torch.equal(torch.cat([b["x"] for b in batches]), torch.from_numpy(x))
    assert torch.equal(torch.cat([b["y"].to_dense() for b in batches]),
                       torch.from_numpy(y.toarray()))


def test_user_source_state_round_trip():
    x = np.arange(30, dtype=np.float32).reshape(30, 1)
    mk = lambda: ctfio.MinibatchSourceFromData(dict(x=x))  # noqa: E731
    full = [b["x"] for b in take(ct.CTFIterableDataset(mk, 4, epoch_size=INFINITELY_REPEAT),
                                 12)]
    a = ct.CTFIterableDataset(mk, 4, epoch_size=INFINITELY_REPEAT)
    first = [b["x"] for b in take(a, 5)]
    b = ct.CTFIterableDataset(mk, 4, epoch_size=INFINITELY_REPEAT)
    b.load_state_dict(a.state_dict())
    rest = [t["x"] for t in take(b, 7)]
    assert all(torch.equal(p, q) for p, q in zip(first + rest, full))


# ---------------------------------------------------------------------------------------------
# workers
# ---------------------------------------------------------------------------------------------

def test_detect_workers_from_the_environment(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                "PMI_RANK", "PMI_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert ct.detect_workers() == (1, 0)
    monkeypatch.setenv("PMI_RANK", "2")
    monkeypatch.setenv("PMI_SIZE", "5")
    assert ct.detect_workers() == (5, 2)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "3")
    assert ct.detect_workers() == (3, 1)
    monkeypatch.setenv("RANK", "0")
    assert ct.detect_workers() == (3, 1)           # RANK without WORLD_SIZE: not a pair
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert ct.detect_workers() == (4, 0)
    assert ct.detect_workers(worker_rank=3) == (4, 3)          # explicit arguments win
    assert ct.detect_workers(number_of_workers=2, worker_rank=1) == (2, 1)
    with pytest.raises(ValueError, match="worker_rank"):
        ct.detect_workers(worker_rank=4)
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ValueError, match="RANK=4"):
        ct.detect_workers()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="integer"):
        ct.detect_workers()


def test_detect_workers_from_a_process_group(tmp_path, monkeypatch):
    import torch.distributed as dist
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    monkeypatch.setenv("WORLD_SIZE", "7")
    monkeypatch.setenv("RANK", "6")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        assert ct.detect_workers() == (1, 0)       # the group, not the environment
        ds = ct.CTFIterableDataset(lambda: None, 8, worker_rank=0)
        assert ds.workers() == (1, 0)
    finally:
        dist.destroy_process_group()


def test_ranks_in_one_process_are_disjoint_and_complete(data):
    """Explicit ranks: the shares of every step partition the single-worker minibatch."""
    one = take(ct.CTFIterableDataset(factory(data), 12, with_keys=True,
                                     epoch_size=INFINITELY_REPEAT, number_of_workers=1), 8)
    shares = [take(ct.CTFIterableDataset(factory(data), 12, with_keys=True,
                                         epoch_size=INFINITELY_REPEAT, number_of_workers=3,
                                         worker_rank=r), 8) for r in range(3)]
    empty = 0
    for i, b in enumerate(one):
        parts = [s[i]["_keys"].tolist() for s in shares]
        assert sorted(sum(parts, [])) == sorted(b["_keys"].tolist())
        empty += sum(not p for p in parts)
        for s in shares:
            if not s[i]["_keys"].numel():
                assert s[i]["x"].shape == (0, 3) and s[i]["y"].shape == (0, 5)
    assert empty > 0                                # some step left a rank without data


# ---------------------------------------------------------------------------------------------
# the reader's path (batches made from the C minibatch, planned once per iteration)
# ---------------------------------------------------------------------------------------------

class GeneralSource(ctfio.MinibatchSource):
    """The file source with next_minibatch overridden (unchanged): the dataset takes its
    general path, over MinibatchData, which the reader's path must equal."""

    def next_minibatch(self, *args, **kwargs):
        return super().next_minibatch(*args, **kwargs)


def general_factory(path, **kw):
    def make():
        src = make_source(path, **kw)
        src.__class__ = GeneralSource
        return src
    return make


def write_equal_lengths(path, n, lengths):
    """Sequences whose streams have one length each (truncated BPTT needs it): x and y on
    every line."""
    rng = random.Random(3)
    with open(path, "w") as f:
        for s in range(n):
            for _ in range(rng.randint(*lengths)):
                f.write("%d |x %d 1 2 |y %d:1\n" % (s, rng.randrange(9), rng.randrange(5)))
    return path


def state_sequence(ds, steps):
    out = []
    for b in take(ds, steps):
        out.append((b, json.dumps(ds.state_dict(), sort_keys=True), ds.epoch))
    return out


def same_run(a, b):
    assert len(a) == len(b)
    for (x, sx, ex), (y, sy, ey) in zip(a, b):
        same_batch(x, y)
        for k in x:
            assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, k
            if x[k].layout == torch.sparse_csr:
                assert x[k].crow_indices().dtype == y[k].crow_indices().dtype
                assert x[k].col_indices().dtype == y[k].col_indices().dtype
        assert list(x) == list(y)                         # same keys in the same order
        assert (sx, ex) == (sy, ey)


@pytest.mark.parametrize("case", [
    dict(),
    dict(layout="padded"),
    dict(streams=["y", "x"]),
    dict(streams=["y"], layout="padded"),
    dict(streams=["x", "x"], with_keys=True),
    dict(source=dict(frame_mode=True)),
    dict(source=dict(precision="double"), layout="padded", with_keys=True),
    dict(source=dict(truncation_length=2)),
    dict(epoch_size=23),
    dict(epoch_size=INFINITELY_REPEAT, number_of_workers=2, worker_rank=1),
    dict(number_of_workers=9, worker_rank=8, layout="padded", with_keys=True),  # empty shares
    dict(device="meta"),
])
def test_reader_path_equals_the_general_path(tmp_path, case):
    """Batches (values, dtypes, shapes, key order, layouts, sparse index dtypes), states and
    epochs of the reader's path are those of the general path over MinibatchData, for every
    layout, stream selection and order, frame mode, precision, truncation, epoch rule, worker
    split and device transfer."""
    case = dict(case)
    src_kw = case.pop("source", {})
    lengths = (1, 1) if src_kw.get("frame_mode") else (1, 4)
    path = write_data(str(tmp_path / "d.ctf"), n=40, lengths=lengths)
    if "truncation_length" in src_kw:
        path = write_equal_lengths(path, 40, (1, 5))
    fast = ct.CTFIterableDataset(factory(path, **src_kw), 7, **case)
    slow = ct.CTFIterableDataset(general_factory(path, **src_kw), 7, **case)
    assert ct._reader_source(fast.source) and not ct._reader_source(slow.source)
    for _ in range(2):      # two iterations: the second continues (and rewinds the read-ahead)
        a, b = state_sequence(fast, 9), state_sequence(slow, 9)
        if case.get("device") == "meta":
            assert all(t.device.type == "meta" for x, _, _ in a for t in x.values())
            assert [(list(x), [t.shape for t in x.values()]) for x, _, _ in a] == \
                [(list(y), [t.shape for t in y.values()]) for y, _, _ in b]
            assert [s for _, s, _ in a] == [s for _, s, _ in b]
        else:
            same_run(a, b)
    if case.get("number_of_workers") == 9:
        assert any(x["x"].shape[0] == 0 for x, _, _ in a)


def test_reader_plan_follows_streams_and_layout(data):
    src = make_source(data)
    kinds = lambda plan: [(kind, i, name, aux) for kind, i, name, aux, _ in plan]  # noqa: E731
    assert kinds(ct._reader_plan(src, None, "packed", False)) == [
        (ct._PACKED, 0, "x", "x_lengths"), (ct._CSR_LENGTHS, 1, "y", "y_lengths")]
    assert kinds(ct._reader_plan(src, ["y", "x"], "padded", False)) == [
        (ct._CSR_LENGTHS, 1, "y", "y_lengths"), (ct._PADDED, 0, "x", "x_mask")]
    assert kinds(ct._reader_plan(src, ["x"], "padded", True)) == [(ct._PLAIN, 0, "x", None)]
    assert kinds(ct._reader_plan(src, ["y"], "packed", True)) == [(ct._CSR_PLAIN, 1, "y",
                                                                    "y_lengths")]
    assert [e[4] for e in ct._reader_plan(src, None, "packed", False)] == [3, 5]
    # An iteration plans with the dataset's own settings: a stream selection is followed.
    ds = ct.CTFIterableDataset(factory(data), 8, streams=["y"], layout="padded")
    assert set(next(iter(ds))) == {"y", "y_lengths"}
    ds.streams = ["x"]                                   # the next iteration plans anew
    assert set(next(iter(ds))) == {"x", "x_mask"}


def test_unknown_stream_is_refused_before_anything_is_read(data):
    src = make_source(data)
    ds = ct.CTFIterableDataset(src, 8, streams=["x", "z"])
    with pytest.raises(KeyError, match="no stream 'z' \\(streams: x, y\\)"):
        next(iter(ds))
    assert src.get_checkpoint_state()["minibatchSourcePosition"] == 0


def test_a_failure_while_making_a_batch_gives_the_minibatch_back(data, monkeypatch):
    ds = ct.CTFIterableDataset(factory(data), 8, with_keys=True, epoch_size=INFINITELY_REPEAT)
    want = keys_of(take(ct.CTFIterableDataset(factory(data), 8, with_keys=True,
                                              epoch_size=INFINITELY_REPEAT), 3))
    real = ct._reader_batch

    def failing(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(ct, "_reader_batch", failing)
    with pytest.raises(KeyboardInterrupt):
        next(iter(ds))
    assert ds.source.get_checkpoint_state()["minibatchSourcePosition"] == 0
    monkeypatch.setattr(ct, "_reader_batch", real)
    assert keys_of(take(ds, 3)) == want


def test_last_minibatch_is_made_when_asked_and_can_be_dropped(data):
    ds = ct.CTFIterableDataset(factory(data), 8, with_keys=True)
    assert ds.last_minibatch is None
    it = iter(ds)
    batch = next(it)
    mb = ds.last_minibatch
    assert mb is ds.last_minibatch                       # made once
    assert [si.name for si in mb] == ["x", "y"]
    md = mb[ds.source.streams.x]
    assert md.keys.tolist() == batch["_keys"].tolist()
    assert md.position == ds.state_dict()["source"]["minibatchSourcePosition"]
    next(it)
    assert ds.last_minibatch is not mb                   # the next batch's
    ds.last_minibatch = None
    assert ds.last_minibatch is None
    pickled = ds.__getstate__()
    assert pickled["_last_mb"] is None and pickled["_last_data"] is None


def test_truncated_source_state_is_saved_per_batch(tmp_path):
    path = write_equal_lengths(str(tmp_path / "d.ctf"), 20, (3, 6))
    ds = ct.CTFIterableDataset(factory(path, truncation_length=2), 4, with_keys=True,
                               epoch_size=INFINITELY_REPEAT)
    src = make_source(path, truncation_length=2)
    it = iter(ds)
    for _ in range(6):
        next(it)
        src.next_minibatch(4)
        assert ds.state_dict()["source"] == src.get_checkpoint_state()
        assert isinstance(ds._state, ct._Saved)


# ---------------------------------------------------------------------------------------------
# device path
# ---------------------------------------------------------------------------------------------

def test_cpu_device_runs_the_transfer_path_without_copying(data):
    ds = ct.CTFIterableDataset(factory(data), 16, device=torch.device("cpu"))
    batch = next(iter(ds))
    mb = {si.name: md for si, md in ds.last_minibatch.items()}
    assert batch["x"].device.type == "cpu"
    assert batch["x"].data_ptr() == mb["x"].values.ctypes.data


def test_device_inside_loader_workers_is_refused(data):
    ds = ct.CTFIterableDataset(factory(data), 16, device="meta")
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1)
    with pytest.raises(RuntimeError, match="DataLoader worker"):
        list(dl)


def test_other_device_gets_a_synchronous_copy(data):
    ds = ct.CTFIterableDataset(factory(data), 16, device="meta", layout="padded")
    batch = next(iter(ds))
    assert all(t.device.type == "meta" for t in batch.values())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_double_buffering_equals_cpu(data):
    cpu = [b for b in ct.CTFIterableDataset(factory(data), 16, with_keys=True)]
    ds = ct.CTFIterableDataset(factory(data), 16, with_keys=True, device="cuda")
    gpu = []
    for b in ds:
        assert all(t.is_cuda for t in b.values())
        gpu.append({k: v.cpu() for k, v in b.items()})
    for x, y in zip(gpu, cpu):
        same_batch(x, y)
    ref = ct.CTFIterableDataset(factory(data), 16)
    list(ref)
    assert ds.state_dict() == ref.state_dict()


# ---------------------------------------------------------------------------------------------
# fork safety (DataLoader workers are fork()ed from a process that may hold live readers)
# ---------------------------------------------------------------------------------------------

@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_reader_in_a_forked_child_is_refused_and_freed_without_hanging(data):
    import gc
    import time
    src = make_source(data)
    src.next_minibatch(8)                 # prefetch threads are running
    cycle = [src]
    cycle.append(cycle)                   # garbage that the child's collector will free
    del src
    gc.disable()
    try:
        pid = os.fork()
        if pid == 0:                      # the child: use, then free the parent's reader
            code = 1
            try:
                cycle[0].next_minibatch(8)
            except RuntimeError as e:
                code = 0 if "fork()" in str(e) else 2
            del cycle[:]
            gc.collect()
            os._exit(code)
        deadline = time.time() + 30
        while time.time() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung freeing the parent's reader")
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        gc.enable()
    del cycle

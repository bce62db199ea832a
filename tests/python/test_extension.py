"""Tests of the raw extension ctfio._ctfio: zero-copy buffers and their lifetime, dtypes and
shapes, the exception mapping, checkpoints, the log callback, the re-entrancy guard and memory
(no leaked minibatches over 10k calls)."""

import ctypes
import gc
import json
import os
import sys
import threading

import numpy as np
import pytest
from conftest import assert_rss_flat

import ctfio
from ctfio import _ctfio

# Sequence 0 spans two lines; y is sparse (dim 4) and present on three lines, the last empty.
SMALL = (
    "0 |x 1 2 3 |y 0:1.5 2:2.5\n"
    "0 |x 4 5 6\n"
    "1 |x 7 8 9 |y 1:3\n"
    "2 |x 10 11 12 |y\n"
)
SMALL_STREAMS = [("x", None, 3, False, False), ("features", "y", 4, True, False)]
SMALL_X = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]


def write(tmp_path, text, name="data.ctf"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def small_reader(tmp_path, **kw):
    kw.setdefault("randomize", False)
    return _ctfio.Reader(write(tmp_path, SMALL), SMALL_STREAMS, **kw)


def many_sequences(n=200, dim=5):
    """n sequences of 1-4 lines with deterministic values."""
    out = []
    for s in range(n):
        for j in range(1 + (s * 7) % 4):
            out.append("%d |a %s\n" % (s, " ".join(str(s * 100 + j * 10 + k) for k in range(dim))))
    return "".join(out)


# -- module --------------------------------------------------------------------------------------

def test_module_constants_and_exceptions():
    # "No limit" has one encoding, the library's, in C and in Python.
    assert _ctfio.INFINITELY_REPEAT == 2**64 - 1 == ctfio.INFINITELY_REPEAT
    assert _ctfio.FULL_DATA_SWEEP == 2**64 - 2 == ctfio.FULL_DATA_SWEEP
    # The version is written once, in ctfio.h; the package's metadata is made from it.
    import importlib.metadata
    import pathlib
    import re
    header = (pathlib.Path(__file__).resolve().parents[2] / "include" / "ctfio.h").read_text()
    written = re.search(r'#define CTF_VERSION_STRING "([^"]+)"', header).group(1)
    assert _ctfio.__version__ == written == importlib.metadata.version("ctfio")
    assert issubclass(_ctfio.ParseError, _ctfio.CTFError)
    assert issubclass(_ctfio.ParseError, ValueError)
    assert issubclass(_ctfio.StateError, _ctfio.CTFError)
    assert issubclass(_ctfio.StateError, ValueError)
    assert not issubclass(_ctfio.CTFError, ValueError)
    e = _ctfio.ParseError("x")
    assert (e.code, e.path, e.line, e.column, e.offset, e.message) == (None,) * 6


def test_internal_types_cannot_be_instantiated():
    with pytest.raises(TypeError):
        _ctfio.Minibatch()
    with pytest.raises(TypeError):
        _ctfio.Buffer()


# -- contents, dtypes, shapes --------------------------------------------------------------------

def test_stream_data_and_buffer_match_stream(tmp_path):
    r = small_reader(tmp_path)
    mb = r.next(4)

    class Data:
        pass
    out = mb.stream_data(Data, ("kx", "ky"), True)
    assert list(out) == ["kx", "ky"] and all(type(d) is Data for d in out.values())
    for i, d in enumerate(out.values()):
        s = mb.stream(i)
        assert (d._view, d._i, d._frame_mode) == (mb, i, True)
        assert (d._is_sparse, d._dim, d.num_samples, d.num_sequences) == (
            s["is_sparse"], s["dim"], s["num_samples"], s["num_sequences"])
        assert (d.position, d.sweep, d.end_of_sweep, d.global_samples, d.samples_per_sweep) == (
            mb.position, mb.sweep, mb.end_of_sweep, mb.global_samples, mb.samples_per_sweep)
        for part, key in enumerate(("values", "lengths", "indptr", "indices")):
            b = mb.buffer(i, part)
            if s[key] is None:
                assert b is None
            else:
                assert np.asarray(b).tolist() == np.asarray(s[key]).tolist()
                assert b.obj is mb
    with pytest.raises(ValueError, match="part"):
        mb.buffer(0, 4)
    with pytest.raises(IndexError):
        mb.buffer(2, 0)
    with pytest.raises(IndexError):
        mb.buffer(-1, 0)
    with pytest.raises(TypeError):
        mb.stream_data(Data, ("only one",), False)
    with pytest.raises(TypeError):
        mb.stream_data(Data, ("kx", "ky"))
    with pytest.raises(TypeError):
        r.next()
    with pytest.raises(TypeError, match="unexpected keyword"):
        r.next(4, workers=2)
    with pytest.raises(TypeError, match="multiple values"):
        r.next(4, num_samples=4)
    assert r.next(num_samples=1, num_workers=1, worker_rank=0) is not None


def test_dense_and_sparse_float(tmp_path):
    r = small_reader(tmp_path)
    mb = r.next(4)
    assert (mb.num_sequences, mb.num_samples, mb.num_streams) == (3, 4, 2)
    assert (mb.end_of_sweep, mb.position, mb.sweep) == (True, 4, 0)
    assert np.asarray(mb.keys).dtype == np.uint64
    assert np.asarray(mb.keys).tolist() == [0, 1, 2]
    assert np.asarray(mb.lines).tolist() == [1, 3, 4]

    x = mb.stream(0)
    assert (x["name"], x["is_sparse"], x["dim"], x["precision"]) == ("x", False, 3, "float")
    assert (x["num_samples"], x["num_sequences"], x["nnz"]) == (4, 3, 12)
    assert x["indptr"] is None and x["indices"] is None
    vals = np.asarray(x["values"])
    assert vals.dtype == np.float32 and vals.shape == (4, 3)
    assert vals.tolist() == SMALL_X
    lengths = np.asarray(x["lengths"])
    assert lengths.dtype == np.uint32 and lengths.tolist() == [2, 1, 1]

    y = mb.stream(1)
    assert y is not None and mb.stream(-1)["name"] == "features"
    assert (y["name"], y["is_sparse"], y["dim"]) == ("features", True, 4)
    assert (y["num_samples"], y["num_sequences"], y["nnz"]) == (3, 3, 3)
    indptr, indices = np.asarray(y["indptr"]), np.asarray(y["indices"])
    assert indptr.dtype == np.int64 and indptr.tolist() == [0, 2, 3, 3]
    assert indices.dtype == np.int32 and indices.tolist() == [0, 2, 1]
    yv = np.asarray(y["values"])
    assert yv.dtype == np.float32 and yv.tolist() == [1.5, 2.5, 3.0]
    assert np.asarray(y["lengths"]).tolist() == [1, 1, 1]
    with pytest.raises(IndexError):
        mb.stream(2)


@pytest.mark.parametrize("precision", ["double", "float64"])
def test_double_precision(tmp_path, precision):
    r = small_reader(tmp_path, precision=precision)
    mb = r.next(4)
    x, y = mb.stream(0), mb.stream(1)
    assert x["precision"] == y["precision"] == "double"
    vals = np.asarray(x["values"])
    assert vals.dtype == np.float64 and vals.shape == (4, 3) and vals.tolist() == SMALL_X
    assert np.asarray(y["values"]).dtype == np.float64
    assert memoryview(x["values"]).format == "d"


def test_buffer_protocol_details(tmp_path):
    mb = small_reader(tmp_path).next(4)
    buf = mb.stream(0)["values"]
    mv = memoryview(buf)
    assert mv.readonly and mv.c_contiguous
    assert (mv.format, mv.itemsize, mv.ndim) == ("f", 4, 2)
    assert mv.shape == (4, 3) and mv.strides == (12, 4)
    assert mv.tolist() == [[float(v) for v in row] for row in SMALL_X]
    assert (buf.format, buf.shape, buf.itemsize, buf.nbytes, len(buf)) == ("f", (4, 3), 4, 48, 4)
    assert buf.obj is mb
    a = np.asarray(buf)
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0, 0] = 1
    with pytest.raises((BufferError, TypeError)):
        (ctypes.c_char * 48).from_buffer(buf)  # asks for a writable buffer
    assert memoryview(mb.stream(1)["indptr"]).format == "q"
    assert memoryview(mb.stream(1)["indices"]).format == "i"
    assert memoryview(mb.stream(1)["lengths"]).format == "I"
    assert memoryview(mb.keys).format == "Q"


def test_zero_copy(tmp_path):
    mb = small_reader(tmp_path).next(4)
    buf = mb.stream(0)["values"]
    a, b = np.asarray(buf), np.asarray(buf)
    assert np.shares_memory(a, b)
    # Two Buffer objects for the same stream describe the same memory.
    assert np.shares_memory(a, np.asarray(mb.stream(0)["values"]))
    assert np.shares_memory(np.asarray(mb.keys), np.asarray(mb.keys))
    f = np.frombuffer(buf, dtype=np.float32)
    assert np.shares_memory(a, f) and f.size == 12


def test_empty_share_buffers(tmp_path):
    r = small_reader(tmp_path)
    # Without randomization sequence i goes to worker i mod 2: rank 1 owns nothing of [seq 0].
    mb = r.next(1, num_workers=2, worker_rank=1)
    assert mb is not None and mb.num_sequences == 0 and mb.position == 2
    x, y = mb.stream(0), mb.stream(1)
    assert np.asarray(x["values"]).shape == (0, 3)
    assert np.asarray(x["values"]).dtype == np.float32
    assert np.frombuffer(x["values"], dtype=np.float32).size == 0
    assert memoryview(x["values"]).shape == (0, 3)
    assert np.asarray(x["lengths"]).shape == (0,)
    assert np.asarray(y["indptr"]).tolist() == [0]
    assert np.asarray(y["indices"]).shape == (0,) and np.asarray(y["values"]).shape == (0,)
    assert np.asarray(mb.keys).shape == (0,)
    # The same call for rank 0, from the same position, gets sequence 0.
    r.position = 0
    mb0 = r.next(1, num_workers=2, worker_rank=0)
    assert np.asarray(mb0.keys).tolist() == [0]


# -- lifetime and reference counts ---------------------------------------------------------------

def test_minibatch_outlives_later_calls_and_reader(tmp_path):
    r = small_reader(tmp_path)
    mb = r.next(4)
    values = np.asarray(mb.stream(0)["values"])
    indices = np.asarray(mb.stream(1)["indices"])
    keys = np.asarray(mb.keys)
    del mb
    gc.collect()
    for _ in range(5):
        r.next(4)
    r.close()
    del r
    gc.collect()
    assert values.tolist() == SMALL_X
    assert indices.tolist() == [0, 2, 1]
    assert keys.tolist() == [0, 1, 2]


def test_buffer_holds_one_reference(tmp_path):
    mb = small_reader(tmp_path).next(4)
    base = sys.getrefcount(mb)
    buf = mb.stream(0)["values"]
    assert sys.getrefcount(mb) == base + 1
    keys = mb.keys
    assert sys.getrefcount(mb) == base + 2
    arr = np.asarray(buf)
    mv = memoryview(keys)
    del buf, keys
    gc.collect()
    assert sys.getrefcount(mb) == base + 2  # the array and the memoryview keep them
    del arr
    mv.release()
    del mv
    gc.collect()
    assert sys.getrefcount(mb) == base
    d = mb.stream(1)
    assert sys.getrefcount(mb) == base + 4  # values, lengths, indptr, indices
    del d
    assert sys.getrefcount(mb) == base


@pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""),
                    reason="AddressSanitizer's quarantine keeps freed memory resident")
def test_no_memory_growth_over_10k_calls(tmp_path):
    dim = 256
    text = "".join("%d |a %s\n" % (i, " ".join(["1.5"] * dim)) for i in range(64))
    r = _ctfio.Reader(write(tmp_path, text), [("a", None, dim, False, False)],
                      randomize=False, keep_data_in_memory=True)

    def step():
        mb = r.next(64)  # 64 KB of values per minibatch: a leak would be ~640 MB
        v = mb.stream(0)
        a = np.asarray(v["values"])
        assert a.shape == (64, dim)
        np.asarray(mb.keys)

    assert_rss_flat(step, warmup=1000, calls=10000, limit_mib=20)
    mb = r.next(64)
    assert sys.getrefcount(mb) == 2


# -- errors --------------------------------------------------------------------------------------

def test_parse_error_attributes(tmp_path):
    path = write(tmp_path, "0 |x 1 2 3\n1 |x 4 z 6\n")
    r = _ctfio.Reader(path, [("x", None, 3, False, False)], randomize=False, max_errors=0)
    with pytest.raises(_ctfio.ParseError) as ei:
        r.next(10)
    e = ei.value
    assert isinstance(e, ValueError) and isinstance(e, _ctfio.CTFError)
    assert e.code == "CTF_EPARSE"
    assert e.path == path
    assert (e.line, e.column, e.offset) == (2, 8, 18)
    assert "expected a number" in e.message
    assert str(e).startswith("%s:2:8: (byte 18) error: " % path)
    assert e.message in str(e)
    # After a data error the reader can only be closed; it keeps saying why.
    with pytest.raises(_ctfio.ParseError):
        r.next(10)
    r.close()


def test_max_errors_tolerates(tmp_path):
    # The bad sample of sequence 1 is dropped; its second line still gives the stream a sample.
    path = write(tmp_path, "0 |x 1 2 3\n1 |x 4 z 6\n1 |x 7 8 9\n2 |x 1 1 1\n")
    logs = []
    r = _ctfio.Reader(path, [("x", None, 3, False, False)], randomize=False, max_errors=1,
                      log=lambda *a: logs.append(a))
    mb = r.next(4)
    assert np.asarray(mb.keys).tolist() == [0, 1, 2]
    assert np.asarray(mb.stream(0)["values"]).tolist() == [[1, 2, 3], [7, 8, 9], [1, 1, 1]]
    s = r.stats()
    assert s["errors"] == 1 and s["streams"][0]["dropped_samples"] == 1
    assert [(sev, line, column, offset) for sev, _, _, line, column, offset in logs] == [
        (0, 2, 8, 18)]


def test_missing_file_is_oserror(tmp_path):
    path = str(tmp_path / "missing.ctf")
    with pytest.raises(OSError) as ei:
        _ctfio.Reader(path, [("x", None, 3, False, False)])
    assert isinstance(ei.value, FileNotFoundError)
    assert ei.value.filename == path
    assert not isinstance(ei.value, _ctfio.CTFError)


def test_bad_config_is_valueerror_naming_the_parameter(tmp_path):
    path = write(tmp_path, SMALL)
    with pytest.raises(ValueError, match=r"streams\[0\]\.dim"):
        _ctfio.Reader(path, [("x", None, 0, False, False)])
    with pytest.raises(ValueError, match="precision"):
        _ctfio.Reader(path, SMALL_STREAMS, precision="half")
    with pytest.raises(ValueError, match="worker_rank"):
        _ctfio.Reader(path, SMALL_STREAMS, num_workers=2, worker_rank=2)
    with pytest.raises(ValueError, match="max_samples"):
        _ctfio.Reader(path, SMALL_STREAMS, max_samples=-3)
    with pytest.raises(ValueError, match="max_sweeps"):
        _ctfio.Reader(path, SMALL_STREAMS, max_samples=4, max_sweeps=1)
    with pytest.raises(TypeError, match="streams"):
        _ctfio.Reader(path, [("x", None, 3)])
    with pytest.raises(TypeError, match="log"):
        _ctfio.Reader(path, SMALL_STREAMS, log=42)
    with pytest.raises(TypeError):
        _ctfio.Reader(path, SMALL_STREAMS, False)  # options are keyword-only
    r = _ctfio.Reader(path, SMALL_STREAMS)
    with pytest.raises(ValueError, match="num_samples"):
        r.next(0)
    with pytest.raises(ValueError, match="num_samples"):
        r.next(-1)
    with pytest.raises(ValueError, match="worker_rank"):
        r.next(1, num_workers=2, worker_rank=5)
    assert r.next(1) is not None  # EINVAL leaves the reader usable


def test_garbage_state_is_state_error(tmp_path):
    r = small_reader(tmp_path)
    with pytest.raises(_ctfio.StateError) as ei:
        r.restore_state("garbage")
    assert ei.value.code == "CTF_ESTATE" and isinstance(ei.value, ValueError)
    with pytest.raises(TypeError):
        r.restore_state(42)
    # A state of another file does not fit.
    other = _ctfio.Reader(write(tmp_path, many_sequences(10), "other.ctf"),
                          [("a", None, 5, False, False)], randomize=False)
    with pytest.raises(_ctfio.StateError, match="file_size|sequences"):
        r.restore_state(other.get_state())
    assert r.next(4) is not None


# -- checkpoints and position --------------------------------------------------------------------

def _run(reader, calls, k=7):
    out = []
    for _ in range(calls):
        mb = reader.next(k)
        out.append((np.asarray(mb.keys).tolist(), np.asarray(mb.stream(0)["values"]).tolist(),
                    mb.position))
    return out


def test_state_round_trip_equals_uninterrupted_run(tmp_path):
    path = write(tmp_path, many_sequences())
    opts = dict(randomize=True, randomization_seed=3, randomization_window=4,
                chunk_size_bytes=256)
    streams = [("a", None, 5, False, False)]
    full = _run(_ctfio.Reader(path, streams, **opts), 60)
    first = _ctfio.Reader(path, streams, **opts)
    head = _run(first, 25)
    state = first.get_state()
    assert json.loads(state)["minibatchSourcePosition"] == first.position == head[-1][2]
    first.close()
    second = _ctfio.Reader(path, streams, num_threads=0, **opts)
    second.restore_state(state)
    assert head + _run(second, 35) == full
    # bytes are accepted too
    third = _ctfio.Reader(path, streams, **opts)
    third.restore_state(state.encode())
    assert _run(third, 35) == full[25:]


def test_position_get_set(tmp_path):
    r = small_reader(tmp_path)
    assert r.position == 0
    first = np.asarray(r.next(2).keys).tolist()
    assert r.position == 2
    r.next(2)
    assert r.position == 4
    r.position = 0
    assert r.position == 0 and np.asarray(r.next(2).keys).tolist() == first
    r.position = 9  # 2 sweeps (8) + 1: continues at the next sequence boundary of sweep 2
    mb = r.next(1)
    assert mb.sweep == 2 and np.asarray(mb.keys).tolist() == [1]
    with pytest.raises(ValueError):
        r.position = -1
    with pytest.raises(AttributeError):
        del r.position


def test_limits_end_the_data(tmp_path):
    r = small_reader(tmp_path, max_samples=_ctfio.FULL_DATA_SWEEP)
    assert r.next(2) is not None and r.next(2) is not None
    assert r.next(2) is None and r.next(2) is None
    r = small_reader(tmp_path, max_sweeps=2)
    assert [r.next(4).sweep for _ in range(2)] == [0, 1] and r.next(4) is None
    r = small_reader(tmp_path, max_samples=3)
    assert r.next(1).position == 2 and r.next(1).position == 3 and r.next(1) is None
    r = small_reader(tmp_path, max_samples=None, max_sweeps=_ctfio.INFINITELY_REPEAT)
    assert r.next(100).num_samples == 100


# -- log callback --------------------------------------------------------------------------------

SHORT = "0 |x 1 2 3\n1 |x 1 2\n2 |x 1 2 3\n3 |x 1\n"


def test_log_receives_warnings_in_order(tmp_path):
    path = write(tmp_path, SHORT)
    logs = []
    r = _ctfio.Reader(path, [("x", None, 3, False, False)], randomize=False,
                      log=lambda *a: logs.append(a))
    mb = r.next(4)
    assert np.asarray(mb.stream(0)["values"]).tolist() == [[1, 2, 3], [1, 2, 0], [1, 2, 3],
                                                           [1, 0, 0]]
    assert [(sev, p, line) for sev, _, p, line, _, _ in logs] == [(1, path, 2), (1, path, 4)]
    sev, text, p, line, column, offset = logs[0]
    assert text.startswith("%s:2:%d: (byte %d) warning: " % (path, column, offset))
    assert offset == len("0 |x 1 2 3\n") + column - 1
    assert r.stats()["warnings"] == 2
    # Problems are reported once, not again in later sweeps.
    r.next(4)
    assert len(logs) == 2


def test_trace_level_zero_hides_warnings(tmp_path):
    logs = []
    r = _ctfio.Reader(write(tmp_path, SHORT), [("x", None, 3, False, False)], randomize=False,
                      trace_level=0, log=lambda *a: logs.append(a))
    r.next(4)
    assert logs == [] and r.stats()["warnings"] == 2


def test_log_exception_propagates_after_delivery(tmp_path):
    seen = []

    def log(sev, text, path, line, column, offset):
        seen.append(line)
        if len(seen) == 1:  # later records are still delivered
            raise KeyError("from the log callback")

    r = _ctfio.Reader(write(tmp_path, SHORT), [("x", None, 3, False, False)], randomize=False,
                      log=log)
    with pytest.raises(KeyError, match="from the log callback"):
        r.next(4)
    assert seen == [2, 4]
    assert r.position == 4  # the reader itself is fine
    assert r.next(4) is not None


def test_reentrancy_guard(tmp_path):
    caught = []
    holder = {}

    def log(*args):
        try:
            holder["r"].stats()
        except RuntimeError as e:
            caught.append(str(e))

    r = _ctfio.Reader(write(tmp_path, SHORT), [("x", None, 3, False, False)], randomize=False,
                      log=log)
    holder["r"] = r
    r.next(4)
    assert len(caught) == 2 and "in use" in caught[0]
    assert r.stats()["warnings"] == 2  # the flag is cleared after the call
    holder.clear()


def test_second_thread_gets_runtime_error(tmp_path):
    entered, release = threading.Event(), threading.Event()

    def log(*args):  # runs inside thread A's next(), which still holds the reader
        entered.set()
        release.wait(10)

    r = _ctfio.Reader(write(tmp_path, SHORT), [("x", None, 3, False, False)], randomize=False,
                      log=log)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("mb", r.next(4)))
    t.start()
    try:
        assert entered.wait(10)
        for call in (lambda: r.next(4), r.close, r.get_state, lambda: r.position):
            with pytest.raises(RuntimeError, match="in use"):
                call()
        assert "busy" in repr(r)
    finally:
        release.set()
        t.join()
    assert out["mb"].num_sequences == 4 and not r.closed
    r.close()


def test_readers_in_threads(tmp_path):
    path = write(tmp_path, many_sequences())
    streams = [("a", None, 5, False, False)]
    opts = dict(randomization_window=3, chunk_size_bytes=300, randomization_seed=1)
    expected = _run(_ctfio.Reader(path, streams, **opts), 40)
    results = [None] * 4

    def work(i):
        results[i] = _run(_ctfio.Reader(path, streams, **opts), 40)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 4


# -- stats, index, close, repr -------------------------------------------------------------------

def test_stats_and_index_info(tmp_path):
    r = small_reader(tmp_path)
    r.next(4)
    s = r.stats()
    for key in ("sequences", "errors", "warnings", "dropped_rows", "dropped_sequences",
                "chunks_loaded", "chunks_resident", "chunks_resident_peak", "bytes_resident",
                "bytes_resident_peak", "num_streams", "streams"):
        assert key in s
    assert (s["sequences"], s["errors"], s["warnings"], s["num_streams"]) == (3, 0, 0, 2)
    assert s["streams"] == [
        {"name": "x", "samples": 4, "nonzeros": 12, "dropped_samples": 0},
        {"name": "features", "samples": 3, "nonzeros": 3, "dropped_samples": 0},
    ]
    info = r.index_info()
    assert info["sequences"] == 3 and info["samples"] == 4 and info["lines"] == 4
    assert info["chunks"] == 1 and info["max_sequence_samples"] == 2
    assert info["line_mode"] is False and info["from_cache"] is False
    assert info["file_size"] == len(SMALL)
    assert info["repeated_ids"] == 0


def test_repeated_ids_are_counted(tmp_path):
    """An id that reappears after other ids warns once per file and counts every time."""
    path = tmp_path / "rep.ctf"
    path.write_text("1 |x 1\n2 |x 2\n1 |x 3\n3 |x 4\n2 |x 5\n1 |x 6\n")
    r = _ctfio.Reader(str(path), [("x", "x", 1, False, False)], randomize=False,
                      trace_level=0)
    assert r.index_info()["repeated_ids"] == 3
    assert r.stats()["warnings"] == 1


def test_close_and_context_manager(tmp_path):
    r = small_reader(tmp_path)
    assert "position=0" in repr(r) and not r.closed
    r.close()
    r.close()  # idempotent
    assert r.closed and "closed" in repr(r)
    for call in (lambda: r.next(1), r.get_state, r.stats, r.index_info,
                 lambda: r.restore_state("{}"), lambda: r.position):
        with pytest.raises(ValueError, match="reader is closed"):
            call()
    with small_reader(tmp_path) as r2:
        mb = r2.next(4)
    assert r2.closed
    assert np.asarray(mb.stream(0)["values"]).tolist() == SMALL_X
    with pytest.raises(ValueError), r2:
        pass


def test_bsconfig_load(tmp_path):
    data = write(tmp_path, SMALL)
    cfg = tmp_path / "reader.cntk"
    cfg.write_text(
        'reader = [\n'
        '  readerType = "CNTKTextFormatReader"\n'
        '  file = "%s"\n'
        '  randomize = false\n'
        '  maxErrors = 3\n'
        '  input = [\n'
        '    x = [ dim = 3 ; format = "dense" ]\n'
        '    features = [ alias = "y" ; dim = 4 ; format = "sparse" ]\n'
        '  ]\n'
        ']\n' % data)
    d = _ctfio.bsconfig_load(str(cfg))
    assert d["path"] == data
    assert d["streams"] == [("x", None, 3, False, False), ("features", "y", 4, True, False)]
    assert (d["randomize"], d["max_errors"], d["precision"]) == (False, 3, "float")
    # one encoding of "no limit" everywhere: the library's, which ctfio.INFINITELY_REPEAT is
    assert (d["max_samples"], d["max_sweeps"], d["log"]) == (2**64 - 1, 2**64 - 1, None)
    # no prefetchChunks in the file: the default, worked out from num_threads at open
    assert d["prefetch_chunks"] is None
    r = _ctfio.Reader(**d)
    assert np.asarray(r.next(4).stream(0)["values"]).tolist() == SMALL_X
    d2 = _ctfio.bsconfig_load(cfg, overrides=["randomizationSeed=9", "precision=double"])
    assert d2["randomization_seed"] == 9 and d2["precision"] == "double"
    bad = tmp_path / "bad.cntk"
    bad.write_text('reader = [\n  file = "%s"\n  noSuchKey = 1\n]\n' % data)
    with pytest.raises(ValueError, match=r"bad\.cntk:3"):
        _ctfio.bsconfig_load(str(bad))
    with pytest.raises(OSError):
        _ctfio.bsconfig_load(str(tmp_path / "missing.cntk"))

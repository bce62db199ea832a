"""The reader parameter table from Python: every row set through Reader's keyword gives the
value a configuration file gives; out-of-range values and wrong types are refused with the
parameter's name; the stub's keywords are the table's; ctfio._check's one-exception-per-mistake
rules; MinibatchSource passes the C library only what the caller gave."""
import os
import subprocess
import sys

import numpy as np
import pytest

import ctfio
from ctfio import _check, _ctfio

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
STREAMS = [("x", None, 3, False, False)]
PARAMS = _ctfio.reader_params()


def as_python(p, v):
    """A table value (an integer) as the config dict spells it."""
    if p["kind"] == "bool":
        return bool(v)
    if p["kind"] == "precision":
        return "double" if v == 8 else "float"
    return v


def other_value(p):
    """A value other than the default, accepted everywhere (as tests/c/test_params.c picks)."""
    if p["kind"] == "bool":
        return int(not p["default"])
    if p["kind"] == "precision":
        return 8 if p["default"] == 4 else 4
    d = p["default"]
    return p["min"] + 1 if d == p["max"] or d >= 1000 else d + 1


def bs_text(p, v):
    if p["kind"] == "bool":
        return "true" if v else "false"
    if p["kind"] == "precision":
        return '"double"' if v == 8 else '"float"'
    return str(v)


def test_table_rows_are_complete():
    assert len(PARAMS) >= 19
    fields = [p["field"] for p in PARAMS]
    assert len(set(fields)) == len(fields)
    for p in PARAMS:
        assert p["kind"] in ("bool", "uint", "limit", "precision") and p["help"]
        assert p["min"] <= p["max"]
    by = {p["field"]: p for p in PARAMS}
    assert by["chunk_size_bytes"]["py_keyword"] == "chunk_size_in_bytes"
    assert by["randomization_seed"]["fingerprint"] and not by["max_errors"]["fingerprint"]


@pytest.mark.parametrize("p", PARAMS, ids=[p["field"] for p in PARAMS])
def test_keyword_and_config_file_give_the_same_value(tmp_path, p):
    v = other_value(p)
    extra = dict(num_workers=2) if p["field"] == "worker_rank" else {}  # rank 1 of 2
    got = _ctfio.reader_config("d.ctf", STREAMS, **{p["field"]: as_python(p, v)}, **extra)
    assert got[p["field"]] == as_python(p, v)
    if p["bs_key"]:
        cfg = tmp_path / "c.cntk"
        cfg.write_text('reader = [\n file = "d.ctf"\n %s = %s\n input = [ x = [ dim = 3; '
                       'format = "dense" ] ]\n]\n' % (p["bs_key"], bs_text(p, v)))
        assert _ctfio.bsconfig_load(str(cfg))[p["field"]] == as_python(p, v)
    # None is "not given": the library's default stays.
    left_out = _ctfio.reader_config("d.ctf", STREAMS)
    assert _ctfio.reader_config("d.ctf", STREAMS, **{p["field"]: None}) == left_out


@pytest.mark.parametrize("p", PARAMS, ids=[p["field"] for p in PARAMS])
def test_range_and_type_errors_name_the_keyword(p):
    name = p["field"]
    if p["kind"] in ("uint", "limit"):
        for bad in (-1, p["max"] + 1) if p["max"] < 2**64 - 1 else (-1, 2**64):
            with pytest.raises(ValueError, match="^%s: must be " % name):
                _ctfio.reader_config("d.ctf", STREAMS, **{name: bad})
        for wrong in (True, 2.9, "3"):
            with pytest.raises(TypeError, match="^%s: must be an int" % name):
                _ctfio.reader_config("d.ctf", STREAMS, **{name: wrong})
        # NumPy integers are ints.
        v = other_value(p)
        extra = dict(num_workers=2) if name == "worker_rank" else {}
        assert _ctfio.reader_config("d.ctf", STREAMS, **{name: np.uint64(v)}, **extra)[name] == v
    elif p["kind"] == "precision":
        with pytest.raises(ValueError, match='^precision: must be "float" or "double"'):
            _ctfio.reader_config("d.ctf", STREAMS, precision="half")
        with pytest.raises(TypeError, match="^precision: must be a str"):
            _ctfio.reader_config("d.ctf", STREAMS, precision=4)


def test_unknown_keyword_is_refused():
    with pytest.raises(TypeError, match="chunk_size_in_bytes"):
        _ctfio.reader_config("d.ctf", STREAMS, chunk_size_in_bytes=5)


def test_no_limit_has_one_spelling():
    assert ctfio.INFINITELY_REPEAT == _ctfio.INFINITELY_REPEAT == 2**64 - 1
    got = _ctfio.reader_config("d.ctf", STREAMS, max_samples=ctfio.INFINITELY_REPEAT,
                               max_sweeps=None)
    assert got["max_samples"] == got["max_sweeps"] == ctfio.INFINITELY_REPEAT
    with pytest.raises(ValueError, match="max_samples"):
        _ctfio.reader_config("d.ctf", STREAMS, max_samples=-1)


def test_stub_is_current_and_the_check_can_fail(tmp_path):
    gen = os.path.join(ROOT, "tools", "gen_stub.py")
    r = subprocess.run([sys.executable, gen, "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        import gen_stub
    finally:
        sys.path.pop(0)
    with open(gen_stub.STUB) as f:
        text = f.read()
    assert gen_stub.render(text, PARAMS) == text
    lines = text.split("\n")
    for p in PARAMS:
        assert any(x.startswith("        %s: " % p["field"]) and x.endswith(" | None = None,")
                   for x in lines), p["field"]
    assert gen_stub.render(text, PARAMS[1:]) != text


# -- ctfio._check ---------------------------------------------------------------------------

def test_check_index_refuses_bool_float_and_str():
    assert _check.index(3, "n") == 3 and _check.index(np.int32(3), "n") == 3
    for wrong, tname in ((True, "bool"), (2.9, "float"), ("3", "str"), (None, "NoneType")):
        with pytest.raises(TypeError, match="^n: must be an int \\(got %s\\)" % tname):
            _check.index(wrong, "n")


def test_check_counts_and_ranges():
    assert _check.count(0, "n") == 0 and _check.positive(1, "n") == 1
    assert _check.positive(None, "n", allow_none=True) is None
    with pytest.raises(ValueError, match="^n: must be an int >= 1 \\(got 0\\)"):
        _check.positive(0, "n")
    with pytest.raises(ValueError, match=">= 0"):
        _check.count(-1, "n")
    with pytest.raises(TypeError):
        _check.positive(2.9, "n")        # never truncated to 2
    with pytest.raises(TypeError):
        _check.positive(None, "n")
    assert _check.number(0.5, "f") == 0.5
    with pytest.raises(TypeError):
        _check.number(True, "f")
    with pytest.raises(ValueError):
        _check.number(float("inf"), "f")
    assert _check.flag(False, "b") is False
    with pytest.raises(TypeError):
        _check.flag(1, "b")


def test_check_limit():
    assert _check.limit(None, "m") is None
    assert _check.limit(ctfio.INFINITELY_REPEAT, "m") is None
    assert _check.limit(ctfio.FULL_DATA_SWEEP, "m") == ctfio.FULL_DATA_SWEEP
    assert _check.limit(7, "m") == 7
    with pytest.raises(ValueError):
        _check.limit(-1, "m")
    with pytest.raises(TypeError):
        _check.limit(True, "m")


def test_check_workers_is_the_library_rule():
    assert _check.workers(4, 3) == (4, 3)
    with pytest.raises(ValueError, match="^worker_rank: must be < num_workers \\(got rank 2 "
                                         "with 2 workers\\)"):
        _check.workers(2, 2)
    with pytest.raises(ValueError, match="^x: num_workers: must be a positive integer"):
        _check.workers(0, 0, "x: ")
    with pytest.raises(ValueError, match="non-negative"):
        _check.workers(2, -1)
    with pytest.raises(TypeError, match="worker_rank: must be an int"):
        _check.workers(2, True)
    with pytest.raises(TypeError, match="number_of_workers: must be an int"):
        _check.workers(2.0, 0)


def test_every_worker_path_uses_the_rule():
    src = ctfio.MinibatchSourceFromData(dict(x=np.zeros((8, 1), np.float32)))
    with pytest.raises(ValueError, match="worker_rank: must be < num_workers"):
        src.next_minibatch(4, 2, 2)
    with pytest.raises(TypeError):
        src.next_minibatch(4, 2.9, 0)
    with pytest.raises(ValueError, match="worker_rank: must be < num_workers"):
        ctfio.training_session(src, lambda d, i: None, number_of_workers=2, worker_rank=5)
    with pytest.raises(TypeError):
        ctfio.training_session(src, lambda d, i: None, number_of_workers=2.9)


# -- MinibatchSource passes only what the caller gave -----------------------------------------

def test_minibatch_source_passes_only_given_parameters(tmp_path):
    path = tmp_path / "d.ctf"
    path.write_text("0 |x 1 2 3\n1 |x 4 5 6\n")
    des = ctfio.CTFDeserializer(str(path), ctfio.StreamDefs(
        x=ctfio.StreamDef(field="x", shape=3)))
    src = ctfio.MinibatchSource(des)
    assert src._params == {}
    src = ctfio.MinibatchSource(des, max_samples=4, randomize=False,
                                chunk_size_in_bytes=1 << 20, randomization_window_in_samples=9)
    assert src._params == dict(max_samples=4, randomize=False, chunk_size_bytes=1 << 20,
                               randomization_window=9, window_in_samples=True)
    assert len(src.next_minibatch(2)[src.streams["x"]].as_sequences()) == 2
    with pytest.raises(TypeError, match="trace_level: must be an int"):
        ctfio.MinibatchSource(des, trace_level=1.0)
    with pytest.raises(ValueError, match="trace_level: must be between 0 and 2"):
        ctfio.MinibatchSource(des, trace_level=3)


def test_cli_help_lists_every_flag_of_the_table():
    cli = os.path.join(ROOT, "build", "ctfio")
    if not os.path.exists(cli):
        pytest.skip("the CLI is not built (make)")
    text = subprocess.run([cli, "--help"], capture_output=True, text=True).stdout
    for p in PARAMS:
        if p["cli_flag"]:
            assert p["cli_flag"] + " " in text or p["cli_flag"] + "\n" in text, p["cli_flag"]

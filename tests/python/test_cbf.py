"""CNTK's binary format (CBF): ``ctfio.convert(..., format="cbf")`` against CNTK's own
``ctf2bin.py`` (byte for byte where the output is one chunk), every CTF file of the test suite
converted and read back value for value, ``CBFDeserializer`` in a ``MinibatchSource``, and the
command line."""
import glob
import os
import pathlib
import runpy
import subprocess
import sys

import numpy as np
import pytest

import ctfio
from ctfio import _ctfio

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
CTF2BIN = os.path.join(TESTS, "cbf", "ctf2bin.py")


def run_ctf2bin(ctf, header_lines, out, chunk_size, precision):
    """CNTK's script, unchanged: run as Python 2 ran it (map returning a list)."""
    header = out + ".header"
    with open(header, "w") as f:
        f.write("".join(line + "\n" for line in header_lines))
    argv = sys.argv
    sys.argv = ["ctf2bin.py", "--input", ctf, "--header", header, "--chunk_size",
                str(chunk_size), "--output", out, "--precision", precision]
    try:
        runpy.run_path(CTF2BIN, init_globals={"map": lambda f, *it: list(map(f, *it))},
                       run_name="__main__")
    finally:
        sys.argv = argv


def sample_text(rng, n, with_sparse=True, digits=9, empty=True):
    lines = []
    for s in range(n):
        for t in range(int(rng.integers(1, 4))):
            vals = " ".join("%.*g" % (digits, v) for v in rng.normal(0, 1e3, 3))
            line = "%d |f %s" % (100 + s, vals)
            if with_sparse and (t == 0 or rng.random() < 0.5):
                idx = rng.permutation(40)[:int(rng.integers(0 if empty else 1, 5))]
                line += " |l " + " ".join("%d:%.*g" % (i, digits, rng.normal()) for i in idx)
            lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("precision", ["float", "double"])
@pytest.mark.parametrize("sparse", [True, False])
def test_one_chunk_is_byte_identical_to_ctf2bin(tmp_path, precision, sparse):
    rng = np.random.default_rng(7 if sparse else 8)
    ctf = str(tmp_path / "in.ctf")
    with open(ctf, "w") as f:
        # ctf2bin skips a sparse sample without entries ("|l" and nothing after it), where
        # the text reader (CNTK's too) delivers an empty sample: the reference avoids them.
        f.write(sample_text(rng, 60, sparse, digits=17, empty=False))
    header = ["features f dense 3"] + (["labels l sparse 40"] if sparse else [])
    ref = str(tmp_path / "ref.bin")
    run_ctf2bin(ctf, header, ref, 1 << 30, precision)
    streams = ctfio.StreamDefs(features=ctfio.StreamDef(field="f", shape=3))
    if sparse:
        streams["labels"] = ctfio.StreamDef(field="l", shape=40, is_sparse=True)
    out = str(tmp_path / "out.bin")
    info = ctfio.convert(ctf, out, format="cbf", streams=streams, chunk_size=1 << 30,
                         precision=precision, show_config=False)
    assert info["chunks"] == 1 and info["sequences"] == 60
    with open(ref, "rb") as a, open(out, "rb") as b:
        assert a.read() == b.read()
    assert not os.path.exists(out + ".part")


def read_sequences(path, streams, precision, **kw):
    """Every sequence in file order: per stream, dense rows or sorted (index, value) samples."""
    dtype = np.float64 if precision in ("double", "float64") else np.float32
    r = _ctfio.Reader(path, streams, precision=precision, randomize=False, max_sweeps=1, **kw)
    seqs = []
    while True:
        mb = r.next(1 << 20)
        if mb is None:
            break
        per = []
        for k, st in enumerate(streams):
            vals = np.asarray(mb.buffer(k, 0)).view(dtype) if mb.buffer(k, 0) is not None \
                else np.zeros(0, dtype)
            lens = np.asarray(mb.buffer(k, 1)).astype(np.int64)
            first = np.concatenate([[0], np.cumsum(lens)])
            if st[3]:
                indptr = np.asarray(mb.buffer(k, 2)).astype(np.int64)
                ind = np.asarray(mb.buffer(k, 3)).astype(np.int64)
                rows = []
                for i in range(len(lens)):
                    rows.append([sorted(zip(ind[indptr[s]:indptr[s + 1]].tolist(),
                                            vals[indptr[s]:indptr[s + 1]].tolist()),
                                        key=lambda p: p[0])
                                 for s in range(first[i], first[i + 1])])
            else:
                dim = st[2]
                rows = [vals[first[i] * dim:first[i + 1] * dim].tolist()
                        for i in range(len(lens))]
            per.append(rows)
        seqs.extend(zip(*per))
    r.close()
    return seqs


def conformance_cases():
    return sorted(glob.glob(os.path.join(TESTS, "conformance", "cases", "*.cntk")))


def golden_cases():
    out = []
    for args in sorted(glob.glob(os.path.join(TESTS, "golden", "ok", "*.args"))):
        words = pathlib.Path(args).read_text().split()
        files = [w for i, w in enumerate(words) if i and words[i - 1] == "--file"]
        inputs = [w for i, w in enumerate(words) if i and words[i - 1] == "--input"]
        if len(files) == 1 and files[0].endswith(".ctf") and inputs:
            out.append((os.path.join(os.path.dirname(args), files[0]), inputs,
                        "--skip-ids" in words or "--skip-sequence-ids" in words))
    return out


def parse_input(spec):
    name, dim, fmt, *alias = spec.split(":")
    return (name, alias[0] if alias else None, int(dim), fmt == "sparse", False)


def round_trip(tmp_path, path, streams, precision, skip_ids):
    out = str(tmp_path / (os.path.basename(path) + "." + precision + ".bin"))
    try:
        _ctfio.cbf_write(path, streams, out, 1 << 12, precision, skip_sequence_ids=skip_ids)
    except (ctfio.CTFError, ValueError, OSError):
        return None  # input the reader refuses too: nothing to compare
    want = read_sequences(path, streams, precision, skip_sequence_ids=skip_ids)
    back = [(s[0], None, s[2], s[3], False) for s in streams]
    got = read_sequences(out, back, precision)
    return want, got


@pytest.mark.parametrize("precision", ["double", "float"])
def test_every_ctf_file_of_the_tests_round_trips(tmp_path, monkeypatch, precision):
    compared = 0
    for cntk in conformance_cases():
        monkeypatch.chdir(os.path.dirname(cntk))
        d = _ctfio.bsconfig_load(cntk)
        pair = round_trip(tmp_path, os.path.abspath(d["path"]), d["streams"], precision,
                          d["skip_sequence_ids"])
        if pair is None:
            continue
        want, got = pair
        if precision == "double":
            assert got == want, cntk
        else:
            # ctf2bin rounds each value to double, then to float: within an ulp of float.
            assert len(got) == len(want)
            for a, b in zip(got, want):
                assert np.allclose(np.array(flat(a)), np.array(flat(b)), rtol=2e-7, atol=0), cntk
        compared += 1
    for path, inputs, skip in golden_cases():
        pair = round_trip(tmp_path, path, [parse_input(s) for s in inputs], precision, skip)
        if pair is not None:
            want, got = pair
            assert len(got) == len(want), path
            if precision == "double":
                assert got == want, path
            compared += 1
    assert compared >= 50


def flat(seq):
    out = []
    for rows in seq:
        for row in rows:
            if isinstance(row, list):
                for x in row:
                    out.extend(x if isinstance(x, tuple) else [x])
            else:
                out.append(row)
    return out


def test_cbf_deserializer_in_a_minibatch_source(tmp_path):
    rng = np.random.default_rng(3)
    ctf = str(tmp_path / "in.ctf")
    with open(ctf, "w") as f:
        f.write(sample_text(rng, 200))
    streams = ctfio.StreamDefs(features=ctfio.StreamDef(field="f", shape=3),
                               labels=ctfio.StreamDef(field="l", shape=40, is_sparse=True))
    out = str(tmp_path / "d.bin")
    ctfio.convert(ctf, out, format="cbf", streams=streams, chunk_size=700, show_config=False)
    text = ctfio.MinibatchSource(ctfio.CTFDeserializer(ctf, streams), randomize=False,
                                 max_sweeps=1)
    # Streams from the file, renamed by field; precision from the file.
    cbf = ctfio.MinibatchSource(
        ctfio.CBFDeserializer(out, ctfio.StreamDefs(x=ctfio.StreamDef(field="features"))),
        randomize=False, max_sweeps=1)
    assert [s.name for s in cbf.stream_infos()] == ["x"]
    a = text.next_minibatch(10000)
    b = cbf.next_minibatch(10000)
    fa = a[text.streams["features"]].asarray()
    fb = b[cbf.streams["x"]].asarray()
    assert np.array_equal(fa, fb)
    every = ctfio.MinibatchSource(ctfio.CBFDeserializer(out), randomization_window_in_chunks=4,
                                  max_sweeps=1)
    assert sorted(s.name for s in every.stream_infos()) == ["features", "labels"]
    total = 0
    while True:
        mb = every.next_minibatch(64)
        if not mb:
            break
        total += mb[every.streams["features"]].num_sequences
    assert total == 200
    with pytest.raises(ValueError, match="no stream 'nope'"):
        ctfio.CBFDeserializer(out, ctfio.StreamDefs(x=ctfio.StreamDef(field="nope")))
    with pytest.raises(ctfio.ParseError, match="not a valid CBF file"):
        ctfio.CBFDeserializer(ctf)


def test_command_line(tmp_path):
    ctf = str(tmp_path / "in.ctf")
    with open(ctf, "w") as f:
        f.write("1 |a 1 2 |b 3:0.5 0:1\n1 |a 3 4\n2 |a 5 6 |b 1:2\n")
    out = str(tmp_path / "o.bin")
    cli = [sys.executable, "-m", "ctfio"]
    r = subprocess.run(cli + ["convert", "cbf", ctf, out, "--input", "x:2:dense:a",
                              "--input", "y:4:sparse:b", "--precision", "double"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "2 sequences" in r.stdout
    r = subprocess.run(cli + ["dump", "--file", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == \
        '{"key": 0, "streams": {"x": [[1, 2], [3, 4]], "y": [[[0, 1], [3, 0.5]]]}}'
    r = subprocess.run(cli + ["convert", "cbf", ctf, ctf, "--input", "x:2:dense:a"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "is the input file" in r.stderr
    assert pathlib.Path(ctf).read_text().startswith("1 |a 1 2")

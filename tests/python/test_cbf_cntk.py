"""CNTK's own CBF reader test, reproduced: its dense data set, read through CNTK's kind of
configuration (readerType = "CNTKBinaryReader", streams renamed with `original`), gives the
minibatches of CNTK's expected output, and equals reading the text twin with the CTF reader.

CNTK's binary test files are not available as bytes here; tests/cbf/README.md says how the data
set is rebuilt (its text twin, written by the formula its expected output shows, then converted
by CNTK's own ctf2bin.py) and how the expected output was checked against CNTK's file.
"""

import os
import runpy
import sys

import numpy as np
import pytest

import ctfio

HERE = os.path.dirname(os.path.abspath(__file__))
CTF2BIN = os.path.join(os.path.dirname(HERE), "cbf", "ctf2bin.py")

# The data set: sample i (one sample per sequence) holds, in stream s of dimension DIMS[s],
# the values 100 * i + 10 * s + j for j < DIMS[s].
STREAMS = (("a", 5), ("b", 3), ("c", 10), ("d", 1))
SAMPLES = 1600  # the test's epoch: the data its expected output covers
# CNTK's expected output files for minibatches of 250 and of 312 samples (both 191,686
# characters; the first line, the start of the second minibatch and the last line as CNTK's).
EXPECTED_CHARS = 191686


def twin_text():
    lines = []
    for i in range(SAMPLES):
        parts = ["|%s %s" % (name, " ".join(str(100 * i + 10 * s + j) for j in range(dim)))
                 for s, (name, dim) in enumerate(STREAMS)]
        lines.append(" ".join(parts))
    return "\n".join(lines) + "\n"


def expected_output(mb):
    """CNTK's reader test output: per minibatch, per stream in the configuration's order, one
    line per sample with its values."""
    out = []
    for first in range(0, SAMPLES, mb):
        rows = range(first, min(first + mb, SAMPLES))
        for s, (_, dim) in enumerate(STREAMS):
            out.extend(" ".join(str(100 * i + 10 * s + j) for j in range(dim)) + "\n"
                       for i in rows)
    return "".join(out)


def ctf2bin(ctf, out, chunk_size):
    header = out + ".header"
    with open(header, "w") as f:
        f.write("".join("%s %s dense %d\n" % (name, name, dim) for name, dim in STREAMS))
    argv = sys.argv
    sys.argv = ["ctf2bin.py", "--input", ctf, "--header", header, "--chunk_size",
                str(chunk_size), "--output", out, "--precision", "float"]
    try:
        runpy.run_path(CTF2BIN, init_globals={"map": lambda f, *it: list(map(f, *it))},
                       run_name="__main__")
    finally:
        sys.argv = argv


CONFIG = """
precision = "float"
Simple = [
    reader = [
        readerType = "%s"
        file = "%s"
        input = [
%s
        ]
        randomize = false
    ]
]
"""


def config(tmp_path, reader, path, text=False):
    if text:
        inputs = "\n".join('            features%d = [ dim = %d ; format = "dense" ; '
                           'alias = "%s" ]' % (s + 1, dim, name)
                           for s, (name, dim) in enumerate(STREAMS))
    else:
        inputs = "\n".join('            features%d = [ original = "%s" ]' % (s + 1, name)
                           for s, (name, _) in enumerate(STREAMS))
    p = tmp_path / (reader + ".cntk")
    p.write_text(CONFIG % (reader, path, inputs))
    return str(p)


def dump(src, mb):
    out = []
    names = ["features%d" % (s + 1) for s in range(len(STREAMS))]
    info = {si.name: si for si in src.streams.values()}
    while True:
        data = src.next_minibatch(mb)
        if not data:
            break
        for name in names:
            vals = np.asarray(data[info[name]].asarray()).reshape(-1, info[name].shape[0])
            out.extend(" ".join("%d" % v for v in row) + "\n" for row in vals)
    return "".join(out)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cntk_simple")
    ctf = d / "simple.txt"
    ctf.write_text(twin_text())
    out = {}
    # One chunk (ctf2bin's chunking after its first chunk makes a chunk of every sequence: a
    # small chunk size gives that layout too).
    for chunk in (1 << 30, 4096):
        b = str(d / ("simple_%d.bin" % chunk))
        ctf2bin(str(ctf), b, chunk)
        out[chunk] = b
    return str(ctf), out, d


def test_expected_output_is_cntks():
    for mb in (250, 312):
        text = expected_output(mb)
        assert len(text) == EXPECTED_CHARS
        assert text.startswith("0 1 2 3 4\n100 101 102 103 104\n")
        assert text.endswith("159830\n159930\n")
    assert "\n24930\n25000 25001 25002 25003 25004\n" in expected_output(250)


@pytest.mark.parametrize("mb", [250, 312])
def test_cntk_simple_dense_as_cntk_reads_it(files, tmp_path, mb):
    ctf, bins, _ = files
    want = expected_output(mb)
    for path in bins.values():
        src = ctfio.MinibatchSource.from_config(config(tmp_path, "CNTKBinaryReader", path),
                                                section="Simple", max_samples=SAMPLES)
        assert dump(src, mb) == want
    text = ctfio.MinibatchSource.from_config(
        config(tmp_path, "CNTKTextFormatReader", ctf, text=True), section="Simple",
        max_samples=SAMPLES)
    assert dump(text, mb) == want

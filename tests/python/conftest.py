"""Shared fixtures: tiny CTF files written into tmp_path, each with the data it holds so that tests
can compare what the reader delivers with what the file says."""

import types

import pytest

# CNTK's io_tests.py MBDATA_SPARSE: two sequences (3 and 4 lines); x sparse (dim 1000) on every
# line, y a dense one-hot label (dim 5) once per sequence.
MBDATA_SPARSE = (
    "0\t|x 560:1\t|y 1 0 0 0 0\n"
    "0\t|x 0:1\n"
    "0\t|x 0:1\n"
    "1\t|x 560:1\t|y 0 1 0 0 0\n"
    "1\t|x 0:1\n"
    "1\t|x 0:1\n"
    "1\t|x 424:1\n"
)
# (row, index) of every non-zero of x, all of value 1
MBDATA_SPARSE_X = [(0, 560), (1, 0), (2, 0), (3, 560), (4, 0), (5, 0), (6, 424)]


def _write(tmp_path, text, name):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.fixture
def write_ctf(tmp_path):
    """write_ctf(text, name="data.ctf") -> path of a new file in tmp_path."""
    return lambda text, name="data.ctf": _write(tmp_path, text, name)


@pytest.fixture
def sparse_file(write_ctf):
    return write_ctf(MBDATA_SPARSE, "sparse.ctf")


def dense_text(n):
    """n one-sample sequences with keys 0..n-1 and lines of equal length (chunks of a known number
    of sequences): x = (i, 2i+1) dense dim 2, y = one-hot of i % 3, dense dim 3."""
    return "".join("%04d |x %04d %04d |y %s\n"
                   % (i, i, 2 * i + 1, " ".join("1" if c == i % 3 else "0" for c in range(3)))
                   for i in range(n))


DENSE_LINE_BYTES = len(dense_text(1))


@pytest.fixture
def make_dense(tmp_path):
    """make_dense(n) -> namespace(path, n, line_bytes, x={key: [x0, x1]})."""
    def make(n):
        path = _write(tmp_path, dense_text(n), "dense%d.ctf" % n)
        return types.SimpleNamespace(path=path, n=n, line_bytes=DENSE_LINE_BYTES,
                                     x={i: [float(i), float(2 * i + 1)] for i in range(n)})
    return make


@pytest.fixture
def dense_file(make_dense):
    return make_dense(60)


def seq_length(s):
    return 1 + (s * 7) % 4  # 1, 4, 3, 2, 1, 4, ...


@pytest.fixture
def seq_file(tmp_path):
    """300 sequences of 1-4 lines; x dense dim 3 on every line = (s, j, 10 s + j) for line j of
    sequence s; y dense one-hot dim 5 (class s % 5) on the first line only.
    Namespace(path, n, samples, lengths={key: len}, x={key: rows}, y={key: class})."""
    n = 300
    lines, x = [], {}
    for s in range(n):
        x[s] = []
        for j in range(seq_length(s)):
            row = [float(s), float(j), float(10 * s + j)]
            x[s].append(row)
            y = " |y %s" % " ".join("1" if c == s % 5 else "0" for c in range(5)) if j == 0 else ""
            lines.append("%d |x %d %d %d%s\n" % (s, s, j, 10 * s + j, y))
    path = _write(tmp_path, "".join(lines), "seq.ctf")
    lengths = {s: seq_length(s) for s in range(n)}
    return types.SimpleNamespace(path=path, n=n, samples=sum(lengths.values()), lengths=lengths,
                                 x=x, y={s: s % 5 for s in range(n)})


def assert_rss_flat(step, warmup, calls, limit_mib):
    """Runs step() warmup times, then calls times, and asserts that the process's peak RSS grew
    by less than limit_mib: the C side frees what each call allocates (no leak, no reference
    kept alive)."""
    import gc
    import resource

    for _ in range(warmup):
        step()
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    for _ in range(calls):
        step()
    gc.collect()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert (after - before) * 1024 < limit_mib * 2**20, (before, after)

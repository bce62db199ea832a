"""Converters into CTF: `ctfio convert libsvm|csv` (the packaged command, and build/ctfio when it
is built) and ctfio.convert (text formats, NumPy, SciPy, .npy/.npz, Parquet), read back with
MinibatchSource(randomize=False) and compared with scikit-learn's load_svmlight_file and
numpy.loadtxt value for value; errors with line and column; the printed reader configuration
reads the file; progress only where asked for."""
import os
import pathlib
import pty
import resource
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import ctfio

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILT_CLI = ROOT / "build" / "ctfio"


def cli(*args, check=True):
    """The packaged command (python -m ctfio)."""
    r = subprocess.run([sys.executable, "-m", "ctfio"] + [str(a) for a in args],
                       capture_output=True, text=True)
    if check and r.returncode:
        raise AssertionError("ctfio %s: rc %d\n%s" % (args, r.returncode, r.stderr))
    return r


def read_all(path, defs, **kw):
    """Every sequence of one sweep in file order, as {stream: MinibatchData}."""
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer(str(path), defs, precision="double"),
                                randomize=False, max_sweeps=1, **kw)
    mb = src.next_minibatch(10 ** 9)
    return {si.name: v for si, v in mb.items()}, src


def dump_svm(tmp_path, X, y, name="d.svm", **kw):
    from sklearn.datasets import dump_svmlight_file
    path = tmp_path / name
    dump_svmlight_file(X, y, str(path), **kw)
    return path


def sparse_data(n=300, dim=40, seed=0):
    rng = np.random.RandomState(seed)
    X = sp.random(n, dim, density=0.15, random_state=seed, format="csr")
    X.data = rng.randn(X.nnz) * 10.0 ** rng.randint(-20, 20, size=X.nnz)
    y = rng.randint(0, 4, n).astype(np.float64)
    return X, y


@pytest.mark.parametrize("zero_based", [True, False])
def test_libsvm_cli_equals_load_svmlight_file(tmp_path, zero_based):
    from sklearn.datasets import load_svmlight_file
    X, y = sparse_data()
    y = y - 1.5     # labels are any float
    src = dump_svm(tmp_path, X, y, zero_based=zero_based)
    out = tmp_path / "d.ctf"
    r = cli("convert", "libsvm", src, out)
    assert "wrote %s: 300 rows" % out in r.stdout
    assert r.stderr == ""     # no progress line: stderr is not a terminal
    Xs, ys = load_svmlight_file(str(src))          # its own 'auto' base, like ours
    got, _ = read_all(out, ctfio.StreamDefs(
        features=ctfio.StreamDef(shape=Xs.shape[1], is_sparse=True),
        labels=ctfio.StreamDef(shape=1)))
    csr = got["features"].csr()
    assert csr.shape == Xs.shape and (csr != Xs).nnz == 0 and csr.nnz == Xs.nnz
    np.testing.assert_array_equal(csr.data, Xs.data)   # exact, bit for bit
    np.testing.assert_array_equal(got["labels"].values[:, 0], ys)


def test_libsvm_qid_sequences_classes_and_dim(tmp_path):
    from sklearn.datasets import load_svmlight_file
    X, y = sparse_data(120, 25, 3)
    qid = np.repeat(np.arange(20) * 7 + 3, 6)
    src = dump_svm(tmp_path, X, y, query_id=qid)
    out = tmp_path / "q.ctf"
    r = ctfio.convert(src, out, classes=4, dim=30, zero_based=True, show_config=False)
    assert (r.sequences, r.rows, r.features_dim, r.labels_dim) == (20, 120, 30, 4)
    assert r.sequence_ids and r.labels_sparse
    Xs, ys, qs = load_svmlight_file(str(src), query_id=True, n_features=30, zero_based=True)
    got, _ = read_all(out, r.stream_defs())
    f, lab = got["features"], got["labels"]
    assert list(f.keys) == sorted(set(qs.tolist()))             # one query = one sequence
    assert [s.shape[0] for s in f.as_sequences()] == [6] * 20
    assert (f.csr() != Xs).nnz == 0
    np.testing.assert_array_equal(lab.csr().toarray().argmax(axis=1), ys)


def test_csv_equals_loadtxt(tmp_path):
    rng = np.random.RandomState(5)
    data = rng.randn(200, 6) * 10.0 ** rng.randint(-10, 10, size=(200, 6))
    data[0] = [0, -0.0, 1, 1e-300, 0.1, 123456789012345678]
    path = tmp_path / "d.csv"
    np.savetxt(str(path), data, delimiter=";", header="a;b;y;c;z;d", comments="", fmt="%.17g")
    out = tmp_path / "d.ctf"
    cli("convert", "csv", path, out, "--label", "y,4", "--delimiter", ";", "--header")
    ref = np.loadtxt(str(path), delimiter=";", skiprows=1)
    got, _ = read_all(out, ctfio.StreamDefs(features=ctfio.StreamDef(shape=4),
                                            labels=ctfio.StreamDef(shape=2)))
    np.testing.assert_array_equal(got["features"].values, ref[:, [0, 1, 3, 5]])
    np.testing.assert_array_equal(got["labels"].values, ref[:, [2, 4]])
    assert np.array_equal(np.signbit(got["features"].values), np.signbit(ref[:, [0, 1, 3, 5]]))
    # The same through Python, column numbers instead of names.
    r = ctfio.convert(str(path), tmp_path / "e.ctf", label=[2, 4], delimiter=";", header=True,
                      show_config=False)
    assert (tmp_path / "e.ctf").read_bytes() == out.read_bytes() and r.features_dim == 4
    tsv = tmp_path / "d.tsv"
    tsv.write_text(path.read_text().replace(";", "\t"))
    ctfio.convert(tsv, tmp_path / "t.ctf", label=["y", "z"], header=True, show_config=False)
    assert (tmp_path / "t.ctf").read_bytes() == out.read_bytes()


@pytest.mark.parametrize("fmt, text, opts, where, msg", [
    ("csv", "1,2,3\n4,5,abc\n", ["--label", "0"], (2, 5),
     "field 3: expected a number, found 'abc'"),
    ("csv", "1,2,3\n\n4,,6\n", ["--label", "0"], (3, 3), "field 2 is empty"),
    ("csv", "1,2,3\n4,5\n", ["--label", "0"], (2, None), "line has 2 fields, expected 3"),
    ("libsvm", "1 1:2\n1 2:x\n", [], (2, 5), "expected a number after '2:', found 'x'"),
    ("libsvm", "1 2:1 1:2\n", [], (1, 7), "feature indices must increase"),
    ("libsvm", "1 1:2\n1 5:1\n", ["--dim", "3", "--one-based"], (2, 3), "out of range (dim=3"),
])
def test_errors_with_line_and_column(tmp_path, fmt, text, opts, where, msg):
    src = tmp_path / ("in." + ("csv" if fmt == "csv" else "svm"))
    src.write_text(text)
    out = tmp_path / "o.ctf"
    r = cli("convert", fmt, src, out, *opts, check=False)
    line, col = where
    loc = "%s:%d:%s" % (src, line, "%d: (byte " % col if col else " ")
    assert r.returncode == 1 and loc in r.stderr and msg in r.stderr, r.stderr
    assert not out.exists() and not (tmp_path / "o.ctf.part").exists()
    kw = dict(label=[int(opts[1])]) if fmt == "csv" else {}
    if "--dim" in opts:
        kw = dict(dim=3, zero_based=False)
    with pytest.raises(ctfio.ParseError) as ei:
        ctfio.convert(src, out, show_config=False, **kw)
    assert (ei.value.line, ei.value.column) == (line, col) and msg in str(ei.value)
    assert ei.value.path == str(src)


def test_usage_errors_exit_2(tmp_path):
    for args in (["convert"], ["convert", "xml", "a", "b"], ["convert", "csv", "a", "b"],
                 ["convert", "libsvm", "a", "b", "--label", "0"],
                 ["convert", "libsvm", "a", "b", "--zero-based", "--one-based"],
                 ["convert", "libsvm", "a", "b", "--dim", "-3"]):
        r = cli(*args, check=False)
        assert r.returncode == 2 and "ctfio convert: " in r.stderr, (args, r.stderr)
    assert "ctfio convert libsvm IN OUT.ctf" in cli("convert", "--help").stdout
    r = cli("convert", "csv", tmp_path / "missing.csv", tmp_path / "o.ctf", "--label", "0",
            check=False)
    assert r.returncode == 1 and "missing.csv: error: cannot stat file" in r.stderr


def test_printed_configuration_reads_the_file(tmp_path):
    X, y = sparse_data(50, 12, 1)
    src = dump_svm(tmp_path, X, y)
    out = tmp_path / "c.ctf"
    text = cli("convert", "libsvm", src, out, "--classes", "4").stdout
    bs = text[text.index("# BrainScript"):text.index("# Python")]
    (tmp_path / "r.cntk").write_text(bs)
    check = cli("check", "--config", tmp_path / "r.cntk")
    assert "result: ok" in check.stdout and "sequences: 50" in check.stdout
    code = text[text.index("# Python"):]
    scope = {}
    exec(code, scope)
    mb = scope["source"].next_minibatch(50)
    assert sum(v.num_sequences for v in mb.values()) == 100     # two streams of 50
    # Python prints the same text it returns.
    r = ctfio.convert(src, tmp_path / "d.ctf", classes=4)
    assert "features = [ dim = 12 ; format = \"sparse\" ]" in r.config


def test_numpy_arrays_npz_sparse_and_float32(tmp_path, capsys):
    rng = np.random.RandomState(2)
    X = rng.randn(70, 5)
    y = rng.randint(0, 3, 70)
    r = ctfio.convert(X, tmp_path / "a.ctf", labels=y, classes=3)
    assert "labels = [ dim = 3 ; format = \"sparse\" ]" in capsys.readouterr().out
    got, _ = read_all(r.path, r.stream_defs())
    np.testing.assert_array_equal(got["features"].values, X)
    np.testing.assert_array_equal(got["labels"].csr().toarray().argmax(1), y)

    X32 = X.astype(np.float32)
    np.save(str(tmp_path / "x.npy"), X32)
    np.save(str(tmp_path / "y.npy"), y.astype(np.float32))
    r = ctfio.convert(tmp_path / "x.npy", tmp_path / "b.ctf", labels=tmp_path / "y.npy",
                      show_config=False)
    assert r.precision == "float"
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer(r.path, r.stream_defs()), randomize=False)
    mb = {k.name: v for k, v in src.next_minibatch(70).items()}
    np.testing.assert_array_equal(mb["features"].values, X32)     # float32, exact
    np.testing.assert_array_equal(mb["labels"].values[:, 0], y)

    np.savez(str(tmp_path / "d.npz"), X=X, y=y.astype(float))
    r = ctfio.convert(tmp_path / "d.npz", tmp_path / "c.ctf", show_config=False)
    got, _ = read_all(r.path, r.stream_defs())
    np.testing.assert_array_equal(got["features"].values, X)
    np.testing.assert_array_equal(got["labels"].values[:, 0], y)

    S, _ = sparse_data(40, 30, 4)
    sp.save_npz(str(tmp_path / "s.npz"), S)
    r = ctfio.convert(tmp_path / "s.npz", tmp_path / "s.ctf", show_config=False)
    assert r.features_sparse and r.labels_dim == 0
    got, _ = read_all(r.path, r.stream_defs())
    assert (got["features"].csr() != S).nnz == 0
    with pytest.raises(ValueError, match="labels for 70 rows"):
        ctfio.convert(X, tmp_path / "e.ctf", labels=y[:5], show_config=False)
    with pytest.raises(ValueError, match="class number"):
        ctfio.convert(X, tmp_path / "e.ctf", labels=y + 0.5, classes=3, show_config=False)


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    rng = np.random.RandomState(9)
    cols = {"a": rng.randn(3000), "label": rng.randint(0, 2, 3000), "b": rng.randn(3000)}
    pq.write_table(pa.table(cols), str(tmp_path / "t.parquet"), row_group_size=700)
    r = ctfio.convert(tmp_path / "t.parquet", tmp_path / "t.ctf", label="label",
                      show_config=False)
    assert (r.rows, r.features_dim, r.labels_dim) == (3000, 2, 1)
    got, _ = read_all(r.path, r.stream_defs())
    np.testing.assert_array_equal(got["features"].values, np.column_stack([cols["a"], cols["b"]]))
    np.testing.assert_array_equal(got["labels"].values[:, 0], cols["label"])
    pq.write_table(pa.table({"a": ["x"], "y": [1]}), str(tmp_path / "s.parquet"))
    with pytest.raises(ValueError, match="not numeric"):
        ctfio.convert(tmp_path / "s.parquet", tmp_path / "s.ctf", label="y", show_config=False)


def test_progress_line_on_a_terminal_only(tmp_path):
    src = tmp_path / "p.svm"
    src.write_text("".join("%d 1:%d 7:0.5\n" % (i % 2, i) for i in range(300000)))
    for exe in ([sys.executable, "-m", "ctfio"],) + (([str(BUILT_CLI)],) if BUILT_CLI.exists()
                                                      else ()):
        out = tmp_path / "p.ctf"
        # A terminal on stderr: the command draws "converting IN: ...%" lines.
        pid, fd = pty.fork()
        if pid == 0:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            os.execv(exe[0], exe + ["convert", "libsvm", str(src), str(out)])
        chunks = []
        while True:
            try:
                b = os.read(fd, 4096)
            except OSError:
                break
            if not b:
                break
            chunks.append(b)
        _, status = os.waitpid(pid, 0)
        text = b"".join(chunks).decode()
        assert os.WEXITSTATUS(status) == 0 and "converting %s: 100.0%%" % src in text, text
        # Not a terminal: nothing on stderr; --quiet: nothing on stdout either.
        r = subprocess.run(exe + ["convert", "libsvm", str(src), str(out), "--quiet"],
                           capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout == "" and r.stderr == ""


def test_python_progress_through_tqdm(tmp_path, capsys):
    pytest.importorskip("tqdm")
    src = tmp_path / "p.svm"
    src.write_text("".join("1 1:%d\n" % i for i in range(200000)))
    calls = []
    ctfio.convert(src, tmp_path / "p.ctf", progress=lambda d, t: calls.append((d, t)),
                  show_config=False)
    size = src.stat().st_size
    assert calls[-1] == (2 * size, 2 * size) and calls == sorted(calls)
    ctfio.convert(src, tmp_path / "p.ctf", show_config=False)     # stderr not a terminal
    assert capsys.readouterr().err == ""
    ctfio.convert(src, tmp_path / "p.ctf", progress=True, show_config=False)
    err = capsys.readouterr().err
    assert "converting" in err and "B/s" in err                  # the real tqdm bar
    ctfio.convert(src, tmp_path / "p.ctf", progress=False, show_config=False)
    assert capsys.readouterr().err == ""

    def stop(done, total):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        ctfio.convert(src, tmp_path / "q.ctf", progress=stop, show_config=False)
    assert not (tmp_path / "q.ctf").exists() and not (tmp_path / "q.ctf.part").exists()


def test_streaming_memory_is_bounded(tmp_path):
    """A 40 MB file converts in a few MB: the converter holds one line, not the file."""
    if not BUILT_CLI.exists():
        pytest.skip("needs build/ctfio (make)")
    src = tmp_path / "big.svm"
    line = "1 " + " ".join("%d:0.%d" % (i, i) for i in range(1, 60)) + "\n"
    with open(src, "w") as f:
        for _ in range(40 * 10 ** 6 // len(line)):
            f.write(line)
    code = ("import resource, subprocess, sys; "
            "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    rss_kb = int(subprocess.run([sys.executable, "-c", code, str(BUILT_CLI), "convert", "libsvm",
                                 str(src), str(tmp_path / "big.ctf")],
                                capture_output=True, text=True, check=True).stdout)
    assert rss_kb < 16 * 1024, rss_kb
    assert resource.getpagesize() > 0


def test_converter_errors_are_the_readers_errors(tmp_path):
    """The converters raise through the reader's one mapping of library errors: a missing
    file is FileNotFoundError with its errno and name, bad input a ParseError with the line."""
    import errno

    missing = str(tmp_path / "missing.svm")
    with pytest.raises(FileNotFoundError) as e:
        ctfio.convert(missing, str(tmp_path / "out.ctf"), show_config=False)
    assert e.value.errno == errno.ENOENT and e.value.filename == missing
    with pytest.raises(FileNotFoundError) as e:
        ctfio.convert(str(tmp_path / "missing.ctf"), str(tmp_path / "out.bin"), format="cbf",
                      streams=ctfio.StreamDefs(x=ctfio.StreamDef(shape=2)), show_config=False)
    assert e.value.errno == errno.ENOENT
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:0.5\n1 2:x\n")
    with pytest.raises(ctfio.ParseError) as e:
        ctfio.convert(str(bad), str(tmp_path / "bad.ctf"), show_config=False)
    assert e.value.path == str(bad) and e.value.line == 2

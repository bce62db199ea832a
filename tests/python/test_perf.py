"""Where the time goes, from Python and the command: source.stats()["perf"] and its verdict,
ctfio.perf's summary and logger, the logging options of ctfio.torch and training_session,
`ctfio dump --stats`, and the progress lines of check, stats and index (on a real
pseudo-terminal, and never off one)."""
import logging
import os
import pathlib
import subprocess
import sys
import time

import pytest

import ctfio
from ctfio.perf import StatsLogger, summary

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFS = dict(x=ctfio.StreamDef(field="x", shape=3), y=ctfio.StreamDef(field="y", shape=5,
                                                                     is_sparse=True))


def write_data(path, n):
    text = "".join("|x %d %d.5 -%d |y %d:1\n" % (i, i * 7 % 1000, i % 13, i % 5)
                   for i in range(n))
    path.write_text(text)
    return len(text.encode())


def source(path, **kw):
    opts = dict(randomize=False, max_sweeps=1, skip_sequence_ids=True, chunk_size_in_bytes=4096)
    opts.update(kw)
    return ctfio.MinibatchSource(ctfio.CTFDeserializer(str(path), DEFS), **opts)


def test_stats_perf_over_one_sweep(tmp_path):
    size = write_data(tmp_path / "d.ctf", 3000)
    for threads in (0, 2):
        src = source(tmp_path / "d.ctf", num_threads=threads)
        before = src.stats()["perf"]
        assert before["next_calls"] == 0 and before["index_bytes"] == size
        assert before["verdict"] == {"stage": "none", "share": 0.0,
                                     "text": "no minibatch read yet: nothing to judge"}
        n = 0
        while src.next_minibatch(37):
            n += 1
        s = src.stats()
        p = s["perf"]
        assert s["sequences"] == 3000                  # the old counters are still there
        assert p["parse_bytes"] == size                 # every byte parsed once in a sweep
        assert p["cut_sequences"] == p["cut_samples"] == 3000
        assert p["minibatches"] == n and p["next_calls"] == n + 1
        assert p["elapsed_ns"] == p["next_ns"] + p["consumer_ns"]
        assert p["work_ns"] == p["cut_ns"] + p["wait_ns"] + p["pack_ns"]
        assert threads or p["next_ns"] >= p["work_ns"]  # with threads: read ahead
        assert p["num_threads"] == threads and p["chunks_loaded"] >= size // 4096
        assert p["verdict"]["stage"] in ("consumer", "read", "parse", "cut", "pack", "open")
        assert 0.0 <= p["verdict"]["share"] <= 1.0 and p["verdict"]["text"]
        line = summary(s)
        assert line.startswith(p["verdict"]["text"]) and "%d minibatches" % n in line


def test_a_slow_consumer_is_named(tmp_path):
    write_data(tmp_path / "d.ctf", 500)
    src = source(tmp_path / "d.ctf", keep_data_in_memory=True, max_sweeps=5)
    for _ in range(25):
        assert src.next_minibatch(20)
        time.sleep(0.02)                                # a training step
    v = src.stats()["perf"]["verdict"]
    assert v["stage"] == "consumer" and v["share"] > 0.5
    assert v["text"].startswith("the consumer is the bottleneck: the reader is idle")


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_stats_logger_logs_every_n_seconds(tmp_path, caplog):
    write_data(tmp_path / "d.ctf", 200)
    src = source(tmp_path / "d.ctf")
    clock = FakeClock()
    log = StatsLogger(src, 10, clock=clock)
    caplog.set_level(logging.INFO, logger="ctfio")
    src.next_minibatch(10)
    assert not log.tick()                               # not yet 10 s
    clock.t += 9.9
    assert not log.tick()
    clock.t += 0.2
    assert log.tick()
    assert not log.tick()                               # the next one 10 s later
    clock.t += 10
    assert log.tick()
    assert log.final() and log.logged == 3
    records = [r for r in caplog.records if r.name == "ctfio"]
    assert len(records) == 3
    assert all(r.getMessage().startswith("input pipeline: ") for r in records)
    # A source without stage counters logs nothing.
    assert not StatsLogger(ctfio.MinibatchSourceFromData(dict(a=[[1.0]])), 1).final()
    for bad in (0, -1, float("inf")):
        with pytest.raises(ValueError, match="log_stats_every"):
            StatsLogger(src, bad)
    for wrong in ("5", True, None):      # a wrong type is a TypeError
        with pytest.raises(TypeError, match="log_stats_every"):
            StatsLogger(src, wrong)


def test_training_session_logs_stats(tmp_path, caplog):
    write_data(tmp_path / "d.ctf", 300)
    caplog.set_level(logging.INFO, logger="ctfio")
    src = source(tmp_path / "d.ctf")
    ctfio.training_session(src, lambda d, i: 1.0, mb_size=50, progress=False,
                           max_samples=300, log_stats_every=1e-9).train()
    msgs = [r.getMessage() for r in caplog.records if r.name == "ctfio"]
    # Every minibatch (the interval is tiny) and once at the end.
    assert len(msgs) == 7 and all(m.startswith("input pipeline: ") for m in msgs)
    assert "6 minibatches" in msgs[-1]
    with pytest.raises(ValueError, match="log_stats_every"):
        ctfio.training_session(src, lambda d, i: 1.0, log_stats_every=0)
    caplog.clear()
    ctfio.training_session(source(tmp_path / "d.ctf"), lambda d, i: 1.0, mb_size=50,
                           progress=False, max_samples=300).train()
    assert not [r for r in caplog.records if r.name == "ctfio"]


def test_torch_dataset_logs_stats(tmp_path, caplog):
    pytest.importorskip("torch")
    import ctfio.torch as ct
    write_data(tmp_path / "d.ctf", 300)
    caplog.set_level(logging.INFO, logger="ctfio")
    ds = ct.CTFIterableDataset(source(tmp_path / "d.ctf"), 100, log_stats_every=3600)
    batches = list(ds)
    assert len(batches) == 3
    msgs = [r.getMessage() for r in caplog.records if r.name == "ctfio"]
    assert len(msgs) == 1 and "3 minibatches" in msgs[0]   # the end of the iteration only
    with pytest.raises(ValueError, match="log_stats_every"):
        ct.CTFIterableDataset(source(tmp_path / "d.ctf"), 100, log_stats_every=-2)


def cli(*args):
    """The packaged command; its output decoded as written (a carriage return stays one)."""
    r = subprocess.run([sys.executable, "-m", "ctfio"] + [str(a) for a in args],
                       capture_output=True)
    r.stdout, r.stderr = r.stdout.decode(), r.stderr.decode()
    assert r.returncode == 0, r.stderr
    return r


INPUTS = ("--input", "x:3:dense", "--input", "y:5:sparse", "--skip-sequence-ids")


def test_cli_dump_stats(tmp_path):
    size = write_data(tmp_path / "d.ctf", 1000)
    plain = cli("dump", "--file", tmp_path / "d.ctf", *INPUTS, "--mb", 100, "--count", 5)
    r = cli("dump", "--file", tmp_path / "d.ctf", *INPUTS, "--mb", 100, "--count", 5,
            "--stats", "--threads", 0)
    assert r.stdout == plain.stdout                     # the JSON lines are untouched
    lines = r.stderr.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["stats"] * 6, r.stderr
    assert "%d bytes scanned" % size in lines[0]
    assert "5 minibatches" in lines[1] and "over 5 calls" in lines[1]
    assert "cut 500 sequences, 500 samples" in lines[2]
    assert "loads on 0 threads" in lines[3]
    assert lines[5].startswith("stats: verdict (")
    assert "--stats" not in plain.stderr and plain.stderr == ""


def run_on_terminal(argv):
    """argv with stdout and stderr on a new pseudo-terminal; everything it wrote."""
    import pty
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-m", "ctfio"] + [str(a) for a in argv])
    out = []
    while True:
        try:
            b = os.read(fd, 65536)
        except OSError:
            break
        if not b:
            break
        out.append(b)
    _, status = os.waitpid(pid, 0)
    text = b"".join(out).decode()
    assert os.WEXITSTATUS(status) == 0, text
    return text


def test_cli_progress_lines(tmp_path):
    small = tmp_path / "small.ctf"
    write_data(small, 100)
    for cmd, what in (("check", "checking"), ("stats", "reading"), ("index", "indexing")):
        forced = cli(cmd, "--file", small, *INPUTS, "--progress")
        assert "\r%s: 100.0%%\n" % what in forced.stderr, forced.stderr
        assert what + ":" not in cli(cmd, "--file", small, *INPUTS, "--no-progress").stderr
        # Off a terminal, and on one for a small input: no line.
        assert what + ":" not in cli(cmd, "--file", small, *INPUTS).stderr
        assert what + ":" not in run_on_terminal([cmd, "--file", small, *INPUTS])
    # A large input on a terminal: the line, up to 100%.
    big = tmp_path / "big.ctf"
    with open(big, "w") as f:
        row = "|x 1 2 3 |y 4:1\n" * 4096
        for _ in range(33 * 1024 * 1024 // len(row) + 1):
            f.write(row)
    text = run_on_terminal(["index", "--file", big, *INPUTS])
    assert "indexing: 100.0%" in text and text.count("indexing:") > 2, text[:300]
    assert "indexing:" not in cli("index", "--file", big, *INPUTS).stderr

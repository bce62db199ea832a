"""The bad-records file: MinibatchSource(bad_records=PATH) with max_errors > 0 writes one JSON
line per skipped record (file, line, column, offset, error, raw text), counted in
stats()["bad_records"], the same with and without threads, at PATH at the end of the data (or
once the source is closed);
the CLI's --bad-records writes the same file and `ctfio check --recheck` reads it back."""

import json
import os
import subprocess
import sys

import pytest

import ctfio

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(ROOT, "build", "ctfio")
BAD = {20: "20 |a 1 x 3", 149: "149 |a 1 2 y", 276: "276 |a z 2 3"}


def data_text():
    return "".join(BAD.get(i, "%d |a %d 2 3" % (i, i)) + "\n" for i in range(300))


def source(path, out, threads, max_errors=5, **kw):
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(path, ctfio.StreamDefs(a=ctfio.StreamDef(field="a", shape=3))),
        randomize=False, max_sweeps=1, max_errors=max_errors, chunk_size_in_bytes=256,
        num_threads=threads, trace_level=0, bad_records=out, **kw)


def read(src):
    keys = []
    while True:
        mb = src.next_minibatch(7)
        if not mb:
            return keys
        keys += [int(k) for k in mb[src.streams.a].keys]


@pytest.mark.parametrize("threads", [0, 2])
def test_bad_records_lists_the_skipped_records(write_ctf, tmp_path, threads):
    path = write_ctf(data_text())
    out = tmp_path / "bad.jsonl"
    src = source(path, out, threads)
    keys = []
    for _ in range(30):  # past two of the bad records, not at the end
        keys += [int(k) for k in src.next_minibatch(7)[src.streams.a].keys]
    assert not out.exists()  # written whole at the end of the data or when closed
    keys += read(src)
    assert keys == [i for i in range(300) if i not in BAD]
    assert src.stats()["bad_records"] == 3
    assert out.exists()
    src.close()
    recs = [json.loads(s) for s in out.read_text().splitlines()]
    text = data_text()
    want = []
    for i, line in sorted(BAD.items()):
        start = text.index("\n%s\n" % line) + 1
        bad = {20: "x", 149: "y", 276: "z"}[i]
        col = line.index(bad) + 1
        want.append({"file": path, "line": i + 1, "column": col, "offset": start + col - 1,
                     "text": line, "truncated": False})
    assert [{k: r[k] for k in want[0]} for r in recs] == want
    assert all("expected a number" in r["error"] for r in recs)


def test_bad_records_same_file_with_and_without_threads(write_ctf, tmp_path):
    path = write_ctf(data_text())
    got = []
    for threads in (0, 2):
        out = tmp_path / ("bad%d.jsonl" % threads)
        with source(path, out, threads) as src:
            read(src)
        got.append(out.read_bytes())
    assert got[0] and got[0] == got[1]


def test_bad_records_refused_without_max_errors(write_ctf, tmp_path):
    path = write_ctf(data_text())
    with pytest.raises(ValueError, match="bad_records.*max_errors"):
        source(path, tmp_path / "bad.jsonl", 0, max_errors=0)


def test_cli_bad_records_and_recheck(write_ctf, tmp_path):
    if not os.path.exists(CLI):
        pytest.skip("build/ctfio is not built")
    path = write_ctf(data_text())
    out = str(tmp_path / "cli.jsonl")
    args = ["--file", path, "--input", "a:3:dense"]
    r = subprocess.run([CLI, "check", *args, "--max-errors", "5", "--bad-records", out],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "bad records: 3 (%s)" % out in r.stdout
    cli_text = (tmp_path / "cli.jsonl").read_text()
    recs = [json.loads(s) for s in cli_text.splitlines()]
    assert [(x["line"], x["text"]) for x in recs] == [(i + 1, t) for i, t in sorted(BAD.items())]
    # The same file as the Python reader's.
    py = tmp_path / "py.jsonl"
    with source(path, py, 2) as src:
        read(src)
    assert py.read_text() == cli_text
    # Read back: each record's error again, under its own file and line.
    r = subprocess.run([CLI, "check", "--recheck", out, "--input", "a:3:dense"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for x in recs:
        assert "%s:%d:%d: error: %s" % (path, x["line"], x["column"], x["error"]) in lines
    assert "still bad: 3" in lines and "ok now: 0" in lines
    # A record whose text parses now (the file was fixed by hand) is reported so.
    fixed = tmp_path / "fixed.jsonl"
    recs[1]["text"] = "149 |a 1 2 3"
    fixed.write_text("".join(json.dumps(x) + "\n" for x in recs))
    r = subprocess.run([CLI, "check", "--recheck", str(fixed), "--input", "a:3:dense"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "%s:150: ok now; recorded: %s" % (path, recs[1]["error"]) in r.stdout.splitlines()
    assert "still bad: 2" in r.stdout
    # --bad-records without --max-errors is refused.
    r = subprocess.run([CLI, "check", *args, "--bad-records", out], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "max_errors" in r.stderr


REMOTE = r"""
import json, sys
sys.path.insert(0, %(here)r)
from s3_server import S3
from test_quarantine import source, read
s3 = S3()
try:
    s3.client.create_bucket(Bucket="quarantine-data")
    s3.client.put_object(Bucket="quarantine-data", Key="q.ctf", Body=open(%(local)r, "rb").read())
    out = []
    for bad in (None, %(out)r):
        src = source("s3://quarantine-data/q.ctf", bad, 0, storage_options=s3.options(),
                     cache_dir=%(idx)r)
        keys = read(src)
        out.append(dict(keys=keys, requests=src._reader.io_counters()["requests"]))
        src.close()
    print(json.dumps(out))
finally:
    s3.stop()
"""


def test_remote_text_is_read_back_with_range_requests(write_ctf, tmp_path):
    pytest.importorskip("moto")
    pytest.importorskip("boto3")
    local = write_ctf(data_text())
    out = tmp_path / "remote.jsonl"
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.run([sys.executable, "-c", REMOTE % dict(
        here=here, local=local, out=str(out), idx=str(tmp_path / "idx"))],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    plain, quarantined = json.loads(p.stdout)
    assert plain["keys"] == quarantined["keys"] == [i for i in range(300) if i not in BAD]
    recs = [json.loads(s) for s in out.read_text().splitlines()]
    assert [(r["file"], r["line"], r["text"]) for r in recs] == [
        ("s3://quarantine-data/q.ctf", i + 1, t) for i, t in sorted(BAD.items())]
    # The texts are read back with range requests on one handle: at most one per record (the
    # remote backend may serve several from one block of this small object).
    assert 1 <= quarantined["requests"] - plain["requests"] <= len(BAD)


def test_bytes_that_are_not_utf8_stay_valid_json(tmp_path):
    path = tmp_path / "bytes.ctf"
    path.write_bytes(b"0 |a 1 2 3\n1 |a 1 \xff 3 |\xc3\xa9 \"q\t\n2 |a 1 2 3\n")
    out = tmp_path / "bytes.jsonl"
    with source(str(path), out, 0) as src:
        assert read(src) == [0, 2]
    raw = out.read_bytes()
    assert b"\\u00ff" in raw and "\u00e9".encode() in raw and b'\\"q\\u0009' in raw
    (rec,) = [json.loads(s) for s in raw.decode("utf-8").splitlines()]
    assert rec["text"] == "1 |a 1 \u00ff 3 |\u00e9 \"q\t"
    if os.path.exists(CLI):
        r = subprocess.run([CLI, "check", "--recheck", str(out), "--input", "a:3:dense"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "%s:2:%d: error: %s" % (path, rec["column"], rec["error"]) in r.stdout
        assert "still bad: 1" in r.stdout

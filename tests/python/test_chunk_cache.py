"""The chunk cache (chunk_cache=DIR): parsed chunks kept in CBF's chunk layout.

* minibatches are the same with and without it, randomized over several sweeps and thread
  counts, for a corpus and a join; a second source is served from it (hits, nothing parsed);
* two processes sharing one directory at once read the same data, without an error;
* a directory that cannot be written, or a disk that fills up (a file size limit in a child
  process, met by a primary's chunk or a joined part's), is one warning and the same data;
* the configuration file's chunkCache and the command line's --chunk-cache reach the reader;
* a remote object (moto on 127.0.0.1) is served from the cache once it was read.
"""

import json
import os
import random
import re
import subprocess
import sys

import numpy as np
import pytest

import ctfio

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CLI = os.path.join(ROOT, "build", "ctfio")
XY = dict(x=ctfio.StreamDef(shape=3), y=ctfio.StreamDef(field="w", shape=40, is_sparse=True))


def render(n, seed, key_base=0):
    rng = random.Random(seed)
    lines = []
    for q in range(n):
        for ln in range(rng.randint(1, 3)):
            line = "%d |x %s" % (key_base + q, " ".join(
                repr(rng.uniform(-1e3, 1e3)) for _ in range(3)))
            if ln == 0 or rng.random() < 0.6:
                base = rng.randrange(40)
                line += " |w " + " ".join("%d:%r" % ((base + 7 * i) % 40, rng.random())
                                          for i in range(rng.randint(0, 4)))
            lines.append(line + "\n")
    return "".join(lines)


@pytest.fixture
def data(tmp_path):
    p = tmp_path / "train.ctf"
    p.write_text(render(400, 3))
    return str(p)


def source(files, **kw):
    kw.setdefault("randomization_window_in_chunks", 3)
    kw.setdefault("randomization_seed", 11)
    kw.setdefault("chunk_size_in_bytes", 1500)
    kw.setdefault("max_sweeps", 3)
    des = kw.pop("deserializers", None) or ctfio.CTFDeserializer(files, XY)
    return ctfio.MinibatchSource(des, **kw)


def read(src, k=13):
    out = []
    while True:
        mb = src.next_minibatch(k)
        if not mb:
            return out
        for si in sorted(mb, key=lambda s: s.name):
            md = mb[si]
            vals = md.csr().toarray() if md.is_sparse else np.asarray(md.values)
            out.append((si.name, md.keys.tolist(), md.lengths.tolist(), vals.dtype.str,
                        vals.tobytes().hex()))


def perf(src):
    return src.stats()["perf"]


def entries(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".chunk")) if os.path.isdir(d) else []


@pytest.mark.parametrize("precision", ["float", "double"])
def test_same_minibatches_and_a_second_source_parses_nothing(data, tmp_path, precision):
    ref = read(source(data, precision=precision, num_threads=2))
    cache = str(tmp_path / "cc")
    for i, threads in enumerate((2, 0, 1, 3)):
        src = source(data, precision=precision, num_threads=threads, chunk_cache=cache)
        assert read(src) == ref
        p = perf(src)
        if i == 0:
            assert p["chunk_cache_misses"] > 0 and p["chunk_cache_hits"] > 0
        else:
            assert p["chunk_cache_misses"] == 0 and p["chunk_cache_hits"] > 0
            assert p["parse_bytes"] == 0
    assert len(entries(cache)) > 5


def test_deserializer_option_corpus_and_join(tmp_path):
    parts = []
    for i in range(3):
        p = tmp_path / ("part-%d.ctf" % i)
        p.write_text(render(120, 10 + i, key_base=1000 * i))
        parts.append(str(p))
    z = tmp_path / "z.ctf"
    z.write_text("".join("%d |z %d\n" % (k, k % 7) for k in range(120)))
    cache = str(tmp_path / "cc")
    ref = read(source(parts))
    src = source(None, deserializers=ctfio.CTFDeserializer(parts, XY, chunk_cache=cache))
    assert read(src) == ref
    src = source(None, deserializers=ctfio.CTFDeserializer(parts, XY, chunk_cache=cache))
    assert read(src) == ref and perf(src)["chunk_cache_misses"] == 0
    join = [ctfio.CTFDeserializer(parts[0], XY),
            ctfio.CTFDeserializer(str(z), dict(z=ctfio.StreamDef(shape=1)))]
    ref = read(source(None, deserializers=join))
    for _ in range(2):
        src = source(None, deserializers=join, chunk_cache=cache)
        assert read(src) == ref
    assert perf(src)["chunk_cache_misses"] == 0


def test_checkpoint_is_unaffected(data, tmp_path):
    cache = str(tmp_path / "cc")
    a = source(data)
    for _ in range(9):
        a.next_minibatch(17)
    state = a.get_checkpoint_state()
    rest = read(a)
    for _ in range(2):
        b = source(data, chunk_cache=cache)
        b.restore_from_checkpoint(state)
        assert read(b) == rest


CHILD = r"""
import json, sys
sys.path.insert(0, %(here)r)
from test_chunk_cache import source, read
src = source(%(data)r, chunk_cache=%(cache)r, num_threads=2, max_sweeps=2)
out = read(src)
print(json.dumps({"n": len(out), "h": hash(str(out)) & 0xffffffff, "data": out}))
"""


def test_two_processes_share_one_directory(data, tmp_path):
    cache = str(tmp_path / "shared")
    ref = read(source(data, num_threads=2, max_sweeps=2))
    code = CHILD % dict(here=HERE, data=data, cache=cache)
    for _ in range(2):  # both store at once, then both read what the other stored
        procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            assert "warning" not in err.lower(), err
            got = json.loads(out)["data"]
            assert [tuple(x) for x in got] == ref
    assert not [f for f in os.listdir(cache) if f.endswith(".tmp")]


def test_unwritable_directory_is_one_warning(data, tmp_path):
    ref = read(source(data))
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    logs = []
    src = source(data, chunk_cache=str(not_a_dir), log=lambda *a: logs.append(a))
    assert read(src) == ref
    warnings = [a for a in logs if a[0] == 1]
    assert len(warnings) == 1 and "chunk cache" in warnings[0][1]


FULL_DISK = r"""
import resource, signal, sys
sys.path.insert(0, %(here)r)
from test_chunk_cache import source, read
import json
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (750, 750))
logs = []
out = read(source(%(data)r, chunk_cache=%(cache)r, log=lambda *a: logs.append(a)))
print(json.dumps({"data": out, "warnings": [a[1] for a in logs if a[0] == 1]}))
"""


def test_a_full_disk_is_one_warning_and_the_same_data(data, tmp_path):
    ref = read(source(data))
    cache = str(tmp_path / "cc")
    p = subprocess.run([sys.executable, "-c", FULL_DISK % dict(here=HERE, data=data,
                                                              cache=cache)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert [tuple(x) for x in got["data"]] == ref
    assert len(got["warnings"]) == 1, got["warnings"]
    assert "chunk cache" in got["warnings"][0]
    # Nothing half-written is left to be read as an entry.
    assert not [f for f in os.listdir(cache) if f.endswith(".tmp")]


FULL_DISK_PART = r"""
import resource, signal, sys
sys.path.insert(0, %(here)r)
from test_chunk_cache import join_of_two, source, read
import json
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (8000, 8000))
logs = []
src = source(None, deserializers=join_of_two(%(tmp)r), chunk_size_in_bytes=100,
             chunk_cache=%(cache)r, log=lambda *a: logs.append(a))
print(json.dumps({"data": read(src), "warnings": [a[1] for a in logs if a[0] == 1]}))
"""


def join_of_two(tmp, write=False):
    """A primary of one-number rows (its chunk entries well under 8,000 bytes) joined with a
    part of 2,500 numbers a row (each entry over 8,000); the files are written in tmp when
    asked."""
    rng = random.Random(5)
    p, q = os.path.join(tmp, "p.ctf"), os.path.join(tmp, "q.ctf")
    with open(p, "w") if write else open(os.devnull, "w") as f:
        f.write("".join("%d |z %d\n" % (k, k % 7) for k in range(100)))
    with open(q, "w") if write else open(os.devnull, "w") as f:
        f.write("".join("%d |v %s\n" % (k, " ".join("%.3f" % rng.random() for _ in range(2500)))
                        for k in range(100)))
    return [ctfio.CTFDeserializer(p, dict(z=ctfio.StreamDef(shape=1))),
            ctfio.CTFDeserializer(q, dict(v=ctfio.StreamDef(shape=2500)))]


def test_a_full_disk_met_by_a_joined_part_is_one_warning(tmp_path):
    # The chunks that meet the full disk are a part's, not the primary's: the warning reaches
    # the log all the same, once, with the joined chunk that loaded the part's chunk.
    ref = read(source(None, deserializers=join_of_two(str(tmp_path), write=True),
                      chunk_size_in_bytes=100))
    cache = str(tmp_path / "cc")
    p = subprocess.run([sys.executable, "-c", FULL_DISK_PART % dict(
        here=HERE, tmp=str(tmp_path), cache=cache)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert [tuple(x) for x in got["data"]] == ref
    assert len(got["warnings"]) == 1, got["warnings"]
    assert "chunk cache" in got["warnings"][0]
    assert entries(cache)  # the primary's chunks were stored


def test_limit_keeps_the_directory_under_it(data, tmp_path):
    cache = str(tmp_path / "cc")
    ref = read(source(data))
    read(source(data, chunk_cache=cache))
    full = sum(os.path.getsize(os.path.join(cache, f)) for f in entries(cache))
    limit = full // 3
    for _ in range(2):
        assert read(source(data, chunk_cache=cache, chunk_cache_limit=limit)) == ref
        held = sum(os.path.getsize(os.path.join(cache, f)) for f in entries(cache))
        assert 0 < held <= limit


def test_configuration_file_and_command_line(data, tmp_path):
    cache = str(tmp_path / "cc")
    cfg = tmp_path / "r.cntk"
    cfg.write_text('reader = [\n  readerType = "CNTKTextFormatReader"\n  file = "%s"\n'
                   '  chunkCache = "%s"\n  chunkCacheLimit = 100000000\n'
                   '  randomizationWindow = 3\n  chunkSizeInBytes = 1500\n  maxSweeps = 2\n'
                   '  input = [\n    x = [ dim = 3 ; format = "dense" ]\n'
                   '    y = [ dim = 40 ; format = "sparse" ; alias = "w" ]\n  ]\n]\n'
                   % (data, cache))
    src = ctfio.MinibatchSource.from_config(str(cfg))
    first = read(src)
    assert perf(src)["chunk_cache_misses"] > 0
    src = ctfio.MinibatchSource.from_config(str(cfg))
    assert read(src) == first and perf(src)["chunk_cache_misses"] == 0
    if not os.path.exists(CLI):
        pytest.skip("build/ctfio is not built")
    args = [CLI, "dump", "--file", data, "--input", "x:3:dense", "--input", "y:40:sparse:w",
            "--mb", "20", "--max-sweeps", "1", "--chunk-size", "1500", "--stats"]
    plain = subprocess.run(args, capture_output=True, text=True, timeout=120)
    cached = subprocess.run(args + ["--chunk-cache", cache], capture_output=True, text=True,
                            timeout=120)
    assert plain.returncode == 0 and cached.returncode == 0, cached.stderr
    body = [ln for ln in cached.stdout.splitlines() if ln.startswith("{") or ln[:1].isdigit()]
    assert body == [ln for ln in plain.stdout.splitlines()
                    if ln.startswith("{") or ln[:1].isdigit()]
    hits, misses = map(int, re.search(r"chunk cache (\d+) hits, (\d+) misses",
                                      cached.stderr).groups())
    assert hits > 0 and misses == 0


REMOTE = r"""
import json, sys
sys.path.insert(0, %(here)r)
from s3_server import S3
from test_chunk_cache import source, read
s3 = S3()
try:
    s3.client.create_bucket(Bucket="chunk-cache-data")
    s3.client.put_object(Bucket="chunk-cache-data", Key="t.ctf", Body=open(%(local)r, "rb").read())
    kw = dict(storage_options=s3.options(), cache_dir=%(idx)r, chunk_cache=%(cache)r)
    out = []
    for _ in range(2):
        src = source("s3://chunk-cache-data/t.ctf", **kw)
        data = read(src)
        p = src.stats()["perf"]
        out.append(dict(data=data, hits=p["chunk_cache_hits"], misses=p["chunk_cache_misses"],
                        remote=p["remote_bytes"]))
    print(json.dumps(out))
finally:
    s3.stop()
"""


def test_remote_object_is_served_from_the_cache(tmp_path):
    pytest.importorskip("moto")
    pytest.importorskip("boto3")
    local = tmp_path / "t.ctf"
    local.write_text(render(200, 21))
    ref = read(source(str(local)))
    # moto runs in a child process: its server changes process-wide settings.
    p = subprocess.run([sys.executable, "-c", REMOTE % dict(
        here=HERE, local=str(local), idx=str(tmp_path / "idx"), cache=str(tmp_path / "cc"))],
        capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    first, second = json.loads(p.stdout)
    assert [tuple(x) for x in first["data"]] == ref
    assert [tuple(x) for x in second["data"]] == ref
    assert first["misses"] > 0 and first["hits"] > 0
    assert second["misses"] == 0 and second["hits"] > 0 and second["remote"] == 0

"""CBF files (CNTK's binary format) on object storage: s3:// and http(s):// .bin objects are
recognised by their magic number through range requests, their header and sequence lengths read
by range, their chunks loaded by range GETs that demand the indexed ETag. Against a real S3
server on 127.0.0.1 (moto's server mode) and the tests' own HTTP range server:

* remote == local, minibatch for minibatch, randomized over several sweeps (a list of URLs and
  a listed pattern), streams taken from the object's header;
* a checkpoint restores into a new reader of the same objects;
* an object replaced under a reader is an error naming it, and an old checkpoint is refused;
* a plain http:// object reads as the local file does;
* the command line (`--file 's3://...*.bin'`, no `--input`) and a configuration file naming the
  binary reader read the bucket as they read the local files.
"""

import os
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("moto")
pytest.importorskip("boto3")

import ctfio  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3_server import S3, RangeServer  # noqa: E402

BUCKET = "ctfio-cbf"
SHARDS = 3
XY = dict(x=ctfio.StreamDef(shape=3), y=ctfio.StreamDef(shape=7, is_sparse=True))


def render(n, seed, shift=0):
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        for t in range(rng.randint(1, 3)):
            xs = (str(rng.randint(-50, 50) / 4 + shift) for _ in range(3))
            line = "%d |x %s" % (i, " ".join(xs))
            if t == 0 or rng.random() < 0.5:
                line += " |y %d:%g" % (rng.randrange(7), rng.randint(1, 9) / 2)
            lines.append(line + "\n")
    return "".join(lines)


def make_bin(tmp, name, n, seed, shift=0):
    ctf = tmp / (name + ".ctf")
    ctf.write_text(render(n, seed, shift))
    out = tmp / (name + ".bin")
    ctfio.convert(str(ctf), str(out), format="cbf", streams=XY, chunk_size=300,
                  show_config=False)
    return out


def digest(mb):
    out = []
    for si in sorted(mb, key=lambda s: s.name):
        md = mb[si]
        vals = md.csr().toarray() if md.is_sparse else np.asarray(md.values)
        out.append((si.name, md.keys.tolist(), md.num_samples, md.lengths.tolist(),
                    vals.tolist()))
    return out


def read(src, k=7, calls=10 ** 6):
    res = []
    for _ in range(calls):
        mb = src.next_minibatch(k)
        if not mb:
            break
        res.append(digest(mb))
    return res


def source(files, **kw):
    kw.setdefault("randomization_window_in_chunks", 3)
    kw.setdefault("randomization_seed", 5)
    kw.setdefault("num_threads", 2)
    return ctfio.MinibatchSource(ctfio.CBFDeserializer(files), **kw)


@pytest.fixture(scope="module")
def s3():
    server = S3()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def shards(s3, tmp_path_factory):
    d = tmp_path_factory.mktemp("cbf")
    s3.client.create_bucket(Bucket=BUCKET)
    local, urls = [], []
    for f in range(SHARDS):
        p = make_bin(d, "part-%d" % f, 40 + 7 * f, seed=f)
        local.append(str(p))
        key = "bin/part-%d.bin" % f
        s3.client.put_object(Bucket=BUCKET, Key=key, Body=p.read_bytes())
        urls.append("s3://%s/%s" % (BUCKET, key))
    return local, urls, "s3://%s/bin/part-*.bin" % BUCKET


def test_remote_cbf_equals_local_randomized_over_sweeps(s3, shards, tmp_path):
    local, urls, pattern = shards
    ref = read(source(local, max_sweeps=3))
    assert len(ref) > 20
    for files in (urls, pattern):
        src = source(files, max_sweeps=3, storage_options=s3.options(), cache_dir=str(tmp_path))
        assert sorted(si.name for si in src.streams.values()) == ["x", "y"]
        assert read(src) == ref
    # Streams picked and renamed by the name in the file, as for a local file.
    renamed = dict(features=ctfio.StreamDef(field="x"))
    a = ctfio.MinibatchSource(ctfio.CBFDeserializer(urls, renamed), max_sweeps=1,
                              randomize=False, storage_options=s3.options(),
                              cache_dir=str(tmp_path))
    b = ctfio.MinibatchSource(ctfio.CBFDeserializer(local, renamed), max_sweeps=1,
                              randomize=False)
    assert read(a) == read(b)


def test_remote_cbf_restores_in_a_new_reader(s3, shards, tmp_path):
    local, urls, _ = shards
    kw = dict(max_sweeps=2, storage_options=s3.options(), cache_dir=str(tmp_path))
    full = read(source(urls, **kw))
    src = source(urls, **kw)
    head = read(src, calls=9)
    state = src.get_checkpoint_state()
    again = source(urls, **kw)
    again.restore_from_checkpoint(state)
    assert head + read(again) == full
    # The objects' ETags are in the checkpoint: the local copies are other files.
    with pytest.raises(ctfio.StateError):
        source(local, max_sweeps=2).restore_from_checkpoint(state)


def test_remote_cbf_changed_object_is_refused(s3, tmp_path):
    a = make_bin(tmp_path, "a", 60, seed=21)
    # The same header and sequence lengths, other values: only the ETag tells them apart.
    b = make_bin(tmp_path, "b", 60, seed=21, shift=1)
    assert a.stat().st_size == b.stat().st_size and a.read_bytes() != b.read_bytes()
    key = "chg/a.bin"
    url = "s3://%s/%s" % (BUCKET, key)
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=a.read_bytes())
    kw = dict(storage_options=s3.options(), cache_dir=str(tmp_path), num_threads=1,
              prefetch_chunks=0, randomization_window_in_chunks=1)
    src = source(url, **kw)
    src.next_minibatch(3)
    state = src.get_checkpoint_state()
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=b.read_bytes())
    with pytest.raises((ctfio.CTFError, OSError)) as e:
        for _ in range(500):
            if not src.next_minibatch(3):
                break
    assert "changed" in str(e.value)
    assert key in str(e.value)
    src2 = source(url, **kw)
    with pytest.raises(ctfio.StateError) as e:
        src2.restore_from_checkpoint(state)
    assert url in str(e.value)


def test_http_cbf_reads_as_the_local_file(shards, tmp_path):
    local, _, _ = shards
    srv = RangeServer({"/d/%d.bin" % i: pathlib.Path(p).read_bytes() for i, p in enumerate(local)})
    try:
        urls = ["%s/d/%d.bin" % (srv.url, i) for i in range(len(local))]
        assert read(source(urls, max_sweeps=2, cache_dir=str(tmp_path))) == \
            read(source(local, max_sweeps=2))
    finally:
        srv.stop()


def test_remote_cbf_command_line_and_configuration_file(s3, shards, tmp_path):
    local, _, pattern = shards
    env = dict(os.environ, **s3.env(), CTFIO_CACHE_DIR=str(tmp_path / "cache"))

    def dump(args):
        p = subprocess.run([sys.executable, "-m", "ctfio", "dump"] + args + [
            "--seed", "3", "--window", "2", "--mb", "7", "--max-sweeps", "2"], env=env,
            capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        return p.stdout

    ref = dump(sum((["--file", f] for f in local), []))
    assert ref.count("\n") > 10
    assert dump(["--file", pattern]) == ref
    cfg = tmp_path / "r.cntk"
    cfg.write_text('reader = [\n readerType = "CNTKBinaryReader"\n file = "%s"\n'
                   ' input = [ features = [ original = "x" ] ]\n randomize = false\n]\n'
                   % pattern)
    p = subprocess.run([sys.executable, "-m", "ctfio", "dump", "--config", str(cfg), "--count",
                        "5"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.count("\n") == 5 and '"key": 0' in p.stdout and "features" in p.stdout

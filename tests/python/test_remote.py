"""Data on object storage: s3:// corpora read by range requests from a real S3 server on
127.0.0.1 (moto's server mode, signatures checked), compared with the same files read locally.

* remote == local, minibatch for minibatch, randomized over several sweeps, through a glob
  listed with ListObjectsV2 and through a list of URLs;
* the index cache of a remote object lives in the cache directory, keyed by URL, ETag and
  size: a second open reads it and sends no range request for indexing;
* an object replaced under a reader is a clear error (If-Match), and a checkpoint taken on the
  old object is refused naming its URL;
* restore in a new process and elastic restore from 2 to 3 workers continue the same order;
* 503/500/429, cut bodies and resets are retried and change nothing in the data; retries are
  bounded;
* 404 (names the key or the bucket), 403 (says whether the signature or the permission is
  wrong) and an unreachable endpoint fail at once.
"""

import json
import os
import pathlib
import random
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("moto")
pytest.importorskip("boto3")

import ctfio  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3_server import S3, FaultProxy, RangeServer, free_port  # noqa: E402

N = 120
SHARDS = 4
BUCKET = "ctfio-data"
XY = dict(x=ctfio.StreamDef(shape=2), y=ctfio.StreamDef(shape=6, is_sparse=True))


def gen(n=N, seed=5):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        nx = rng.randint(1, 3)
        xs = [[rng.randint(0, 99), rng.randint(0, 99)] for _ in range(nx)]
        ys = [(rng.randrange(6), rng.randint(1, 9)) for _ in range(rng.randint(1, 3))]
        out.append((i, xs, ys))
    return out


def render(seqs):
    lines = []
    for key, xs, ys in seqs:
        for l in range(max(len(xs), len(ys))):
            line = str(key)
            if l < len(xs):
                line += " |x %d %d" % tuple(xs[l])
            if l < len(ys):
                line += " |y %d:%d" % ys[l]
            lines.append(line + "\n")
    return "".join(lines)


def digest(mb):
    out = []
    for si in sorted(mb, key=lambda s: s.name):
        md = mb[si]
        vals = md.csr().toarray() if md.is_sparse else np.asarray(md.values)
        out.append((si.name, md.keys.tolist(), md.num_samples, md.lengths.tolist(),
                    vals.tolist()))
    return out


def read(src, k, calls=10 ** 6, **kw):
    res = []
    for _ in range(calls):
        mb = src.next_minibatch(k, **kw)
        if not mb:
            break
        res.append(digest(mb))
    return res


def source(files, **kw):
    kw.setdefault("randomization_window_in_chunks", 4)
    kw.setdefault("randomization_seed", 7)
    kw.setdefault("chunk_size_in_bytes", 200)
    kw.setdefault("num_threads", 2)
    return ctfio.MinibatchSource(ctfio.CTFDeserializer(files, XY), **kw)


@pytest.fixture(scope="module")
def s3():
    server = S3()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def corpus(s3, tmp_path_factory):
    """The same shards on local disk and in the bucket."""
    d = tmp_path_factory.mktemp("shards")
    seqs = gen()
    s3.client.create_bucket(Bucket=BUCKET)
    local, urls = [], []
    for f in range(SHARDS):
        text = render(seqs[f * N // SHARDS:(f + 1) * N // SHARDS])
        p = d / ("part-%05d.ctf" % f)
        p.write_text(text)
        local.append(str(p))
        key = "train/part-%05d.ctf" % f
        s3.client.put_object(Bucket=BUCKET, Key=key, Body=text.encode())
        urls.append("s3://%s/%s" % (BUCKET, key))
    # A key the pattern must not match (another folder level, another suffix).
    s3.client.put_object(Bucket=BUCKET, Key="train/extra/part-9.ctf", Body=b"0 |x 1 2\n")
    s3.client.put_object(Bucket=BUCKET, Key="train/part-x.txt", Body=b"0 |x 1 2\n")
    return local, urls, "s3://%s/train/part-*.ctf" % BUCKET


def test_remote_equals_local_randomized_over_sweeps(s3, corpus, tmp_path):
    local, urls, pattern = corpus
    for k in (3, 17):
        ref = read(source(local, max_sweeps=3), k)
        assert len(ref) > 3
        for files in (pattern, urls):
            src = source(files, max_sweeps=3, storage_options=s3.options(),
                         cache_dir=str(tmp_path / "cache"))
            assert src.files == urls
            assert read(src, k) == ref
            c = src._reader.io_counters()
            assert c["requests"] > 0 and c["bytes"] > 0
    # file= names the same argument by keyword; filename stays CNTK's positional name.
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer(file=pattern, streams=XY), max_sweeps=1,
                                randomization_window_in_chunks=4, randomization_seed=7,
                                chunk_size_in_bytes=200, storage_options=s3.options(),
                                cache_dir=str(tmp_path / "cache"))
    assert src.files == urls
    assert read(src, 3) == read(source(local, max_sweeps=1), 3)
    with pytest.raises(TypeError) as e:
        ctfio.CTFDeserializer(local[0], XY, file=pattern)
    assert "given twice" in str(e.value)
    with pytest.raises(TypeError) as e:
        ctfio.CTFDeserializer(streams=XY)
    assert "file=" in str(e.value)


def test_remote_workers_and_elastic_restore(s3, corpus, tmp_path):
    _, urls, pattern = corpus
    kw = dict(max_sweeps=2, storage_options=s3.options(), cache_dir=str(tmp_path))
    srcs = [source(pattern, **kw) for _ in range(2)]
    got = []
    for _ in range(5):
        for r, s in enumerate(srcs):
            mb = s.next_minibatch(9, num_data_partitions=2, partition_index=r)
            got += mb[s.streams.x].keys.tolist() if mb else []
    state = srcs[0].get_checkpoint_state()
    srcs = [source(pattern, **kw) for _ in range(3)]
    for s in srcs:
        s.restore_from_checkpoint(state)
    while True:
        mbs = [s.next_minibatch(9, num_data_partitions=3, partition_index=r)
               for r, s in enumerate(srcs)]
        if not any(mbs):
            break
        got += [k for mb in mbs if mb for k in mb[srcs[0].streams.x].keys.tolist()]
    assert sorted(got) == sorted(list(range(N)) * 2)


RESTORE_CHILD = r"""
import json, sys
import numpy as np
import ctfio
sys.path.insert(0, %(here)r)
from test_remote import source, read
state = json.loads(sys.stdin.read())
src = source(%(pattern)r, max_sweeps=2, cache_dir=%(cache)r)
src.restore_from_checkpoint(state)
print(json.dumps(read(src, 11)))
"""


def test_remote_restore_in_a_new_process_from_the_environment(s3, corpus, tmp_path):
    _, _, pattern = corpus
    cache = str(tmp_path / "c")
    src = source(pattern, max_sweeps=2, storage_options=s3.options(), cache_dir=cache)
    read(src, 11, calls=4)
    state = src.get_checkpoint_state()
    rest = read(src, 11)
    env = dict(os.environ, **s3.env())
    p = subprocess.run([sys.executable, "-c", RESTORE_CHILD % dict(
        here=HERE, pattern=pattern, cache=cache)], input=json.dumps(state), env=env,
        capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout) == json.loads(json.dumps(rest))


def test_remote_index_cache_keyed_by_url_etag_size(s3, corpus, tmp_path):
    _, urls, pattern = corpus
    cache = tmp_path / "cache"
    kw = dict(max_sweeps=1, storage_options=s3.options(), cache_dir=str(cache),
              prefetch_chunks=0)
    src = source(urls, **kw)
    cold = src._reader.io_counters()
    assert not src._reader.index_info()["from_cache"]
    assert len(list(cache.glob("*.ctfidx"))) == SHARDS
    first = read(src, 13)
    src = source(urls, **kw)
    warm = src._reader.io_counters()
    assert src._reader.index_info()["from_cache"]
    # A warm open asks each object's identity once and reads no data for indexing.
    assert warm["requests"] == SHARDS and warm["bytes"] <= SHARDS
    assert cold["bytes"] > warm["bytes"]
    assert read(src, 13) == first
    # Over a pattern the listing gives each object's ETag and size: with valid caches the
    # open is the listing alone, one request per 1,000 keys.
    src = source(pattern, **kw)
    assert src._reader.io_counters()["requests"] == 1
    assert src._reader.index_info()["from_cache"]
    assert read(src, 13) == first
    # Counted at the server's side too (a proxy of ours in front of it): a warm open of the
    # pattern sends the listing and no GET or HEAD of any object.
    proxy = FaultProxy(s3.port)
    try:
        kw["storage_options"] = s3.options(proxy.endpoint)
        source(pattern, **kw)  # the proxy's endpoint is part of the cache key: cold once
        proxy.seen.clear()
        src = source(pattern, **kw)
        assert proxy.seen and all(m == "GET" and "list-type=2" in p for m, p in proxy.seen)
        assert read(src, 13) == first
    finally:
        proxy.stop()


def test_remote_changed_object_is_refused(s3, corpus, tmp_path):
    seqs = gen(40, seed=11)
    s3.client.put_object(Bucket=BUCKET, Key="chg/a.ctf", Body=render(seqs).encode())
    url = "s3://%s/chg/a.ctf" % BUCKET
    kw = dict(storage_options=s3.options(), cache_dir=str(tmp_path), chunk_size_in_bytes=100,
              randomization_window_in_chunks=2, num_threads=1, prefetch_chunks=0)
    src = source(url, **kw)
    src.next_minibatch(3)
    state = src.get_checkpoint_state()
    # Same keys, other values: another ETag (and here another size).
    seqs2 = [(k, [[v + 1 for v in x] for x in xs], ys) for k, xs, ys in seqs]
    s3.client.put_object(Bucket=BUCKET, Key="chg/a.ctf", Body=render(seqs2).encode())
    with pytest.raises((ctfio.CTFError, OSError)) as e:
        for _ in range(200):
            if not src.next_minibatch(3):
                break
    assert "changed" in str(e.value)
    assert "chg/a.ctf" in str(e.value)
    # A new reader indexes the new object; the old checkpoint does not restore on it.
    src2 = source(url, **kw)
    with pytest.raises(ctfio.StateError) as e:
        src2.restore_from_checkpoint(state)
    assert url in str(e.value)


def test_remote_faults_are_retried_and_change_nothing(s3, corpus, tmp_path):
    _, _, pattern = corpus
    proxy = FaultProxy(s3.port)
    try:
        ref = read(source(pattern, max_sweeps=2, storage_options=s3.options(),
                          cache_dir=str(tmp_path / "a")), 10)
        # Each fault between two good answers: the data's requests meet every kind.
        faults = ["503", "500", "429", "cut", "reset"] * 4
        proxy.inject([x for f in faults for x in (f, None, None)])
        src = source(pattern, max_sweeps=2, storage_options=s3.options(proxy.endpoint),
                     cache_dir=str(tmp_path / "b"))
        got = read(src, 10)
        assert got == ref
        assert proxy.injected == faults
        c = src._reader.io_counters()
        # (libcurl itself resends a request whose reused connection was reset before any
        # answer; every other fault is one retry of ours.)
        assert c["retries"] >= len([f for f in faults if f != "reset"])
        # Bounded: a server that keeps failing ends the read with a clear message.
        proxy.inject(["503"] * 50)
        with pytest.raises((ctfio.CTFError, OSError)) as e:
            source(pattern, storage_options=s3.options(proxy.endpoint, max_retries=3),
                   cache_dir=str(tmp_path / "c"))
        assert "after 4 attempts" in str(e.value) and "503" in str(e.value)
        assert len(proxy.injected) == 4
    finally:
        proxy.stop()


def test_remote_errors_say_what_is_wrong(s3, corpus, tmp_path):
    _, urls, _ = corpus
    kw = dict(cache_dir=str(tmp_path))

    def fails(url, opts):
        t0 = time.monotonic()
        with pytest.raises((ctfio.CTFError, OSError)) as e:
            source(url, storage_options=opts, **kw)
        assert time.monotonic() - t0 < 10  # at once, not after retries
        return str(e.value)

    msg = fails("s3://%s/train/nope.ctf" % BUCKET, s3.options())
    assert "no such key" in msg and "train/nope.ctf" in msg
    msg = fails("s3://no-such-bucket-x/a.ctf", s3.options())
    assert "no such bucket" in msg and "no-such-bucket-x" in msg
    msg = fails(urls[0], s3.options(secret="wrong" + s3.secret[5:]))
    assert "403" in msg and "signature" in msg
    msg = fails(urls[0], s3.options(key="AKIAUNKNOWNKEY000000"))
    assert "403" in msg and "access key id" in msg
    msg = fails(urls[0], s3.options(key=s3.weak_key, secret=s3.weak_secret))
    assert "403" in msg and "may not read" in msg
    msg = fails(urls[0], s3.options("http://127.0.0.1:%d" % free_port()))
    assert "cannot reach 127.0.0.1" in msg
    msg = fails("s3://%s/train/zz-*.ctf" % BUCKET, s3.options())
    assert "no object matches" in msg


def test_remote_options_from_the_environment_and_profiles(tmp_path):
    from ctfio import remote
    cred = tmp_path / "credentials"
    cred.write_text("[default]\naws_access_key_id = D\naws_secret_access_key = DS\n"
                    "[p2]\naws_access_key_id = P\naws_secret_access_key = PS\n"
                    "aws_session_token = PT\n")
    conf = tmp_path / "config"
    conf.write_text("[profile p2]\nregion = eu-west-3\n")
    base = {"AWS_SHARED_CREDENTIALS_FILE": str(cred), "AWS_CONFIG_FILE": str(conf),
            "HOME": str(tmp_path)}
    r = remote.resolve(env=dict(base))
    assert (r["access_key_id"], r["secret_access_key"]) == ("D", "DS")
    assert r["cache_dir"] == os.path.join(str(tmp_path), ".cache", "ctfio")
    r = remote.resolve(env=dict(base, AWS_PROFILE="p2", CTFIO_CACHE_DIR="/x"))
    assert (r["access_key_id"], r["session_token"], r["region"]) == ("P", "PT", "eu-west-3")
    assert r["cache_dir"] == "/x"
    r = remote.resolve(env=dict(base, AWS_ACCESS_KEY_ID="E", AWS_SECRET_ACCESS_KEY="ES",
                                AWS_ENDPOINT_URL="http://a", AWS_ENDPOINT_URL_S3="http://b",
                                AWS_DEFAULT_REGION="r1"))
    assert (r["access_key_id"], r["endpoint"], r["region"]) == ("E", "http://b", "r1")
    r = remote.resolve({"key": "K", "secret": "S", "endpoint": "http://c"}, cache_dir=False,
                       env=dict(base, AWS_ACCESS_KEY_ID="E"))
    assert (r["access_key_id"], r["endpoint"]) == ("K", "http://c") and "cache_dir" not in r
    r = remote.resolve({"anon": True}, env=dict(base))
    assert "access_key_id" not in r
    with pytest.raises(TypeError):
        remote.resolve({"bogus": 1}, env=dict(base))


def test_remote_cli_and_configuration_file(s3, corpus, tmp_path):
    """`ctfio dump --file 's3://...*'` and a configuration file's `file = "s3://..."` read
    the bucket with the endpoint and keys from the AWS variables; the output is the local
    files' output."""
    local, _, pattern = corpus
    env = dict(os.environ, **s3.env(), CTFIO_CACHE_DIR=str(tmp_path / "cache"))

    def dump(args):
        p = subprocess.run([sys.executable, "-m", "ctfio", "dump"] + args + [
            "--input", "x:2:dense", "--input", "y:6:sparse", "--seed", "3", "--window", "2",
            "--chunk-size", "150", "--mb", "7", "--max-sweeps", "2"], env=env,
            capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        return p.stdout

    ref = dump(sum((["--file", f] for f in local), []))
    assert ref.count("\n") > 10
    assert dump(["--file", pattern]) == ref
    cfg = tmp_path / "r.cntk"
    cfg.write_text('reader = [\n readerType = "CNTKTextFormatReader"\n file = "%s"\n'
                   ' input = [ x = [ dim = 2 ; format = "dense" ]\n'
                   '           y = [ dim = 6 ; format = "sparse" ] ]\n]\n' % pattern)
    p = subprocess.run([sys.executable, "-m", "ctfio", "dump", "--config", str(cfg), "--count",
                        "5", "--randomize", "false"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.count("\n") == 5 and '"key": 0' in p.stdout
    # `ctfio index` on remote objects says where their caches went: the cache directory.
    for files in (["--file", pattern], ["--file", pattern.replace("*", "00000")]):
        p = subprocess.run([sys.executable, "-m", "ctfio", "index"] + files + [
            "--input", "x:2:dense", "--input", "y:6:sparse"], env=env, capture_output=True,
            text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        lines = [x for x in p.stdout.splitlines() if x.startswith("index cache: ")]
        assert lines and all(x.startswith("index cache: %s/" % (tmp_path / "cache"))
                             for x in lines), p.stdout
        assert all(os.path.exists(x.split(" ")[2]) for x in lines)


def test_remote_torchrun_two_ranks_over_one_bucket(s3, corpus, tmp_path):
    """torchrun with 2 ranks, each reading the same object through ctfio.torch with the
    endpoint and keys from the environment: per step the shares are disjoint and their union
    is the single-process run over the same file on local disk."""
    pytest.importorskip("torch")
    import test_torchrun as tt
    import torchrun_worker as tw
    local = tmp_path / "local"
    local.mkdir()
    tt.write_data(str(local / "data.ctf"))
    s3.client.put_object(Bucket=BUCKET, Key="torchrun/data.ctf",
                         Body=(local / "data.ctf").read_bytes())
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1", **s3.env(),
               CTFIO_CACHE_DIR=str(tmp_path / "cache"))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.join(HERE, "torchrun_worker.py"), "run", "s3://%s/torchrun" % BUCKET,
           str(out)]
    p = subprocess.run(cmd, cwd=str(out), env=env, capture_output=True, text=True,
                       timeout=tt.TIMEOUT)
    assert p.returncode == 0, p.stderr[-4000:]
    ranks = tt.load(str(out), "run", 2)
    ref, _ = tt.reference(str(local), tw.STEPS)
    tt.check_steps(ranks, ref)
    keys = [k for res in ranks for step in res["sweep"] for k in step]
    assert sorted(keys) == list(range(tt.NUM_SEQS))


def test_plain_https_url_unsigned(corpus, tmp_path):
    """An http:// URL is read unsigned by range requests, as the local file; a pattern over
    HTTP is refused (there is no listing)."""
    local, _, _ = corpus
    srv = RangeServer({"/d/%d.ctf" % i: pathlib.Path(p).read_bytes() for i, p in enumerate(local)})
    try:
        urls = ["%s/d/%d.ctf" % (srv.url, i) for i in range(len(local))]
        ref = read(source(local, max_sweeps=2), 8)
        assert read(source(urls, max_sweeps=2, cache_dir=str(tmp_path)), 8) == ref
        with pytest.raises(ValueError) as e:
            source(srv.url + "/d/*.ctf", cache_dir=str(tmp_path))
        assert "no listing" in str(e.value)
        with pytest.raises((ctfio.CTFError, OSError)) as e:
            source(srv.url + "/d/missing.ctf", cache_dir=str(tmp_path))
        assert "404" in str(e.value)
    finally:
        srv.stop()


def test_remote_botocore_credential_chain(s3, corpus, tmp_path):
    """With botocore installed, a profile whose keys only botocore's chain can give (here a
    credential_process) signs the requests; explicit storage_options and the AWS variables
    still come first, and an http(s):// read never asks botocore."""
    pytest.importorskip("botocore")
    from ctfio import remote
    local, _, pattern = corpus
    helper = tmp_path / "creds.py"
    helper.write_text("import json\nprint(json.dumps({'Version': 1, 'AccessKeyId': %r, "
                      "'SecretAccessKey': %r}))\n" % (s3.key, s3.secret))
    conf = tmp_path / "config"
    conf.write_text("[profile proc]\ncredential_process = %s %s\n" % (sys.executable, helper))
    env = {"AWS_CONFIG_FILE": str(conf), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no"),
           "HOME": str(tmp_path), "AWS_PROFILE": "proc"}
    r = remote.resolve(env=dict(env), s3=True)
    assert (r["access_key_id"], r["secret_access_key"]) == (s3.key, s3.secret)
    assert "access_key_id" not in remote.resolve(env=dict(env), s3=False)
    assert "access_key_id" not in remote.resolve(env=dict(env), s3=True, botocore=False)
    r = remote.resolve({"key": "K", "secret": "S"}, env=dict(env), s3=True)
    assert (r["access_key_id"], r["secret_access_key"]) == ("K", "S")
    r = remote.resolve(env=dict(env, AWS_ACCESS_KEY_ID="E", AWS_SECRET_ACCESS_KEY="ES"), s3=True)
    assert r["access_key_id"] == "E"
    # End to end: a reader in a new process whose only credentials are the profile's process.
    penv = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    penv.update(env, AWS_ENDPOINT_URL_S3=s3.endpoint, AWS_REGION="us-east-1",
                CTFIO_CACHE_DIR=str(tmp_path / "cache"))
    code = ("import ctfio, sys\nsrc = ctfio.MinibatchSource(ctfio.CTFDeserializer(sys.argv[1], "
            "dict(x=ctfio.StreamDef(shape=2), y=ctfio.StreamDef(shape=6, is_sparse=True))), "
            "randomize=False, max_sweeps=1)\n"
            "print(sum(src.next_minibatch(1000)[src.streams.x].num_sequences for _ in [0]))\n")
    p = subprocess.run([sys.executable, "-c", code, pattern], env=penv, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert int(p.stdout) == N


def test_remote_keys_with_dot_segments_are_read_as_written(s3, tmp_path):
    """A key with '.' or '..' segments is its own object, not a path to resolve: the signed
    request names it exactly and the server finds it."""
    s3.client.create_bucket(Bucket="ctfio-dots")
    s3.client.put_object(Bucket="ctfio-dots", Key="a/../x.ctf", Body=b"1 |x 1 2\n")
    s3.client.put_object(Bucket="ctfio-dots", Key="x.ctf", Body=b"2 |x 3 4\n")
    s3.client.put_object(Bucket="ctfio-dots", Key="./y.ctf", Body=b"3 |x 5 6\n")
    xs = dict(x=ctfio.StreamDef(shape=2))
    for url, key in [("s3://ctfio-dots/a/../x.ctf", 1), ("s3://ctfio-dots/x.ctf", 2),
                     ("s3://ctfio-dots/./y.ctf", 3)]:
        src = ctfio.MinibatchSource(ctfio.CTFDeserializer(url, xs), randomize=False, max_sweeps=1,
                                    storage_options=s3.options(), cache_dir=str(tmp_path))
        mb = src.next_minibatch(4)
        assert [mb[si].keys.tolist() for si in mb] == [[key]], url

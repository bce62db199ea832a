"""Each answer of an HTTP server is checked before its bytes are used: raw-socket servers on
127.0.0.1, written here, answer as a broken, stale or hostile server would, and record what
they were asked.

* a 206 must name the range asked for and the indexed size (Content-Range), a 200 with the
  whole object to a range request is "the server ignored the range request", a 206 without
  or with a garbled Content-Range and a 416 at open say so;
* redirects are bounded, a stalled transfer is given up while a slow one completes;
* keys go out exactly as written ('.' and '..' segments included), credentials of any length
  go out whole;
* objects without ETags are fingerprinted by Last-Modified and size;
* messages name what happened and never print credentials or a presigned URL's query.
"""

import os
import socket
import sys
import threading
import time

import pytest

import ctfio

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

XY = dict(x=ctfio.StreamDef(shape=2))
LINE = "%04d |x %d %d\n"
NUM = 40
LM = "Tue, 01 Dec 2026 10:00:00 GMT"


def corpus_text(n=NUM, base=0):
    # Lines of equal length: chunks of equal size, so that one chunk's bytes parse as another's.
    return "".join(LINE % (i, (base + i) % 10, (base + i) % 7) for i in range(n)).encode()


class Req:
    def __init__(self, line, headers):
        self.line = line
        self.method, self.target = line.split(" ")[:2]
        self.headers = headers

    def range(self):
        r = self.headers.get("range")
        if not r:
            return None
        a, b = r.split("=")[1].split("-")
        return int(a), int(b)


def answer(status, headers=(), body=b"", reason="X"):
    head = "HTTP/1.1 %d %s\r\n" % (status, reason)
    hs = list(headers)
    if not any(h.lower().startswith("content-length:") for h in hs):
        hs.append("Content-Length: %d" % len(body))
    head += "".join(h + "\r\n" for h in hs) + "\r\n"
    return head.encode() + body


def ranged(body, req, etag='"e1"', extra=(), lm=None):
    """An honest server's answer to req for body."""
    r = req.range()
    hs = list(extra)
    if etag:
        hs.append("ETag: " + etag)
    if lm:
        hs.append("Last-Modified: " + lm)
    if r is None:
        return answer(200, hs, body)
    a, b = r[0], min(r[1], len(body) - 1)
    if a >= len(body):
        return answer(416, hs + ["Content-Range: bytes */%d" % len(body)])
    return answer(206, hs + ["Content-Range: bytes %d-%d/%d" % (a, b, len(body))],
                  body[a:b + 1])


class RawServer:
    """Keep-alive HTTP/1.1 on 127.0.0.1: handler(req, n) gives the raw bytes of each answer
    (None closes the connection; a list is sent piece by piece, `pace` seconds apart, a
    ("sleep", s) piece waits s seconds); every request is recorded. Bounded in requests and
    time."""

    def __init__(self, handler, max_requests=2000, pace=0.0):
        self.handler = handler
        self.pace = pace
        self.requests = []
        self.max_requests = max_requests
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.stopped = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        deadline = time.monotonic() + 120
        while not self.stopped and time.monotonic() < deadline:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        c.settimeout(10)
        buf = b""
        try:
            while not self.stopped:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                hdrs = {}
                for h in lines[1:]:
                    k, _, v = h.partition(":")
                    hdrs[k.strip().lower()] = v.strip()
                req = Req(lines[0], hdrs)
                with self.lock:
                    if len(self.requests) >= self.max_requests:
                        return
                    self.requests.append(req)
                    n = len(self.requests)
                out = self.handler(req, n)
                if out is None:
                    return
                if isinstance(out, bytes):
                    out = [out]
                for i, piece in enumerate(out):
                    if isinstance(piece, tuple):
                        time.sleep(min(piece[1], 10))
                        continue
                    if i and self.pace:
                        time.sleep(self.pace)
                    c.sendall(piece)
        except OSError:
            pass
        finally:
            c.close()

    def stop(self):
        self.stopped = True
        self.sock.close()
        self.thread.join(5)


@pytest.fixture
def serve():
    servers = []

    def start(handler, **kw):
        s = RawServer(handler, **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def source(url, **kw):
    opts = kw.pop("storage_options", {})
    opts.setdefault("backoff_ms", 1)
    kw.setdefault("chunk_size_in_bytes", 200)
    kw.setdefault("randomize", False)
    kw.setdefault("max_sweeps", 1)
    return ctfio.MinibatchSource(ctfio.CTFDeserializer(url, XY), storage_options=opts,
                                 cache_dir=False, **kw)


def read_all(src, k=7):
    keys = []
    for _ in range(10000):
        mb = src.next_minibatch(k)
        if not mb:
            break
        for si in mb:
            keys += mb[si].keys.tolist()
    return keys


def fails(url, exc=(ctfio.CTFError, OSError), **kw):
    with pytest.raises(exc) as e:
        read_all(source(url, **kw))
    return str(e.value)


# --- Content-Range -------------------------------------------------------------------------


def test_206_for_another_range_is_refused(serve):
    body = corpus_text()
    chunk = 200 - 200 % len(LINE % (0, 0, 0))

    def h(req, n):
        r = req.range()
        if r and r[0] >= chunk and r[1] - r[0] < 4096:
            # The chunk before the one asked for, said honestly.
            a, b = r[0] - chunk, r[1] - chunk
            return answer(206, ['ETag: "e1"', "Content-Range: bytes %d-%d/%d" % (a, b, len(body))],
                          body[a:b + 1])
        return ranged(body, req)

    s = serve(h)
    msg = fails(s.url + "/d.ctf", storage_options=dict(max_retries=2))
    assert "Content-Range" in msg and "bytes %d-" % chunk in msg


def test_cbf_chunk_for_another_chunk_is_refused(serve, tmp_path):
    """Equal-sized CBF chunks: a server that answers chunk k with chunk k-1 (its Content-Range
    says so) would deliver another chunk's samples, which decode cleanly."""
    ctf = tmp_path / "d.ctf"
    ctf.write_bytes(corpus_text(400))
    out = tmp_path / "d.bin"
    ctfio.convert(str(ctf), str(out), format="cbf", streams=XY, chunk_size=600,
                  show_config=False)
    body = out.read_bytes()
    sizes = {}

    def h(req, n):
        r = req.range()
        if r and r[1] - r[0] + 1 >= 500:  # a chunk load
            size = r[1] - r[0] + 1
            sizes.setdefault(size, []).append(r[0])
            a = r[0] - size if r[0] - size >= min(sizes[size]) else r[0]
            return answer(206, ['ETag: "e1"', "Content-Range: bytes %d-%d/%d"
                                % (a, a + size - 1, len(body))], body[a:a + size])
        return ranged(body, req)

    s = serve(h)
    src = ctfio.MinibatchSource(ctfio.CBFDeserializer(s.url + "/d.bin"), randomize=False,
                                max_sweeps=1, storage_options=dict(backoff_ms=1, max_retries=1),
                                cache_dir=False)
    with pytest.raises((ctfio.CTFError, OSError)) as e:
        read_values(src)
    assert "another range" in str(e.value) and "Content-Range" in str(e.value)


def test_206_total_other_than_the_indexed_size_is_a_change(serve):
    body = corpus_text()

    def h(req, n):
        r = req.range()
        if r and r[0] > 0:
            a, b = r[0], min(r[1], len(body) - 1)
            return answer(206, ['ETag: "e1"',
                                "Content-Range: bytes %d-%d/%d" % (a, b, len(body) + 5)],
                          body[a:b + 1])
        return ranged(body, req)

    s = serve(h)
    msg = fails(s.url + "/d.ctf", exc=ctfio.DataChangedError)
    assert "size" in msg and str(len(body) + 5) in msg


def test_200_to_a_range_request_is_not_retried(serve):
    body = corpus_text()
    s = serve(lambda req, n: answer(200, ['ETag: "e1"'], body))
    msg = fails(s.url + "/d.ctf")
    assert "ignored the range request" in msg
    # No retries of an answer that will not change: open (1) + index (1) + the first load.
    assert len(s.requests) <= 4


def test_206_without_content_range_at_open(serve):
    body = corpus_text()
    s = serve(lambda req, n: answer(206, ['ETag: "e1"'], body[:1]))
    msg = fails(s.url + "/d.ctf")
    assert "206" in msg and "Content-Range" in msg


def test_garbled_content_range_at_open(serve):
    body = corpus_text()
    s = serve(lambda req, n: answer(206, ['ETag: "e1"', "Content-Range: bytes 0-0/x12"],
                                    body[:1]))
    msg = fails(s.url + "/d.ctf")
    assert "Content-Range" in msg and "x12" in msg and "is empty" not in msg


def test_416_at_open_is_not_an_empty_file(serve):
    s = serve(lambda req, n: answer(416, ['ETag: "e1"']) if req.range()
              else answer(200, ['ETag: "e1"', "Content-Length: 640"]))
    msg = fails(s.url + "/d.ctf")
    assert "416" in msg and "640 bytes" in msg and "is empty" not in msg


# --- Redirects and stalls --------------------------------------------------------------------


def test_redirect_loop_is_bounded_and_named(serve):
    s = serve(lambda req, n: answer(302, ["Location: " + req.target]))
    msg = fails(s.url + "/d.ctf")
    assert "redirect" in msg and "loop" in msg
    # One attempt of at most a handful of redirects, not retried.
    assert len(s.requests) <= 8


def test_a_slow_transfer_completes_and_a_stalled_one_ends(serve):
    body = corpus_text(200)

    def slow(req, n):
        r = req.range()
        out = ranged(body, req)
        if not r or r[1] - r[0] < 1000:
            return out
        # The whole body over ~2.5 s, 200 bytes at a time: slower than one timeout_ms in all.
        head, _, rest = out.partition(b"\r\n\r\n")
        return [head + b"\r\n\r\n"] + [rest[i:i + 200] for i in range(0, len(rest), 200)]

    s = serve(slow, pace=0.2)
    keys = read_all(source(s.url + "/d.ctf", storage_options=dict(timeout_ms=1000)))
    assert keys == list(range(200))
    assert len(s.requests) == len({(r.range()) for r in s.requests})  # nothing retried

    def stalled(req, n):
        out = ranged(body, req)
        if req.range() and req.range()[1] - req.range()[0] >= 1000:
            return [out[:len(out) // 2], ("sleep", 4.0)]
        return out

    s = serve(stalled)
    t0 = time.monotonic()
    msg = fails(s.url + "/d.ctf", storage_options=dict(timeout_ms=1000, max_retries=1))
    assert "after 2 attempts" in msg
    # (libcurl averages the speed over a few seconds: a stall is seen some seconds late.)
    assert time.monotonic() - t0 < 40


# --- Keys and credentials as written ---------------------------------------------------------


def s3_opts(s, **kw):
    d = dict(endpoint=s.url, key="AKIDTEST", secret="secret", region="us-east-1")
    d.update(kw)
    return d


def test_dot_segments_go_out_as_written(serve):
    body = corpus_text()
    s = serve(lambda req, n: ranged(body, req))
    for url, line in [("s3://bkt/a/../x.ctf", "/bkt/a/%2E%2E/x.ctf"),
                      ("s3://bkt/../../etc/x.ctf", "/bkt/%2E%2E/%2E%2E/etc/x.ctf"),
                      ("s3://bkt/./y.ctf", "/bkt/%2E/y.ctf")]:
        del s.requests[:]
        assert read_all(source(url, storage_options=s3_opts(s))) == list(range(NUM))
        assert {r.target for r in s.requests} == {line}, url
    # A plain URL's path is sent as written too.
    del s.requests[:]
    assert read_all(source(s.url + "/a/../d.ctf")) == list(range(NUM))
    assert {r.target for r in s.requests} == {"/a/../d.ctf"}


@pytest.mark.parametrize("length", [3000, 10000])
def test_session_tokens_of_any_length_go_out_whole(serve, length):
    body = corpus_text()
    s = serve(lambda req, n: ranged(body, req))
    token = "".join("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[i % 36] for i in range(length))
    assert read_all(source("s3://bkt/d.ctf", storage_options=s3_opts(s, token=token))) == \
        list(range(NUM))
    assert s.requests and all(r.headers.get("x-amz-security-token") == token
                              and "Signature=" in r.headers.get("authorization", "")
                              for r in s.requests)


def test_the_tool_sends_long_session_tokens_whole(serve, tmp_path):
    import subprocess
    body = corpus_text()
    s = serve(lambda req, n: ranged(body, req))
    env = dict(os.environ, AWS_ENDPOINT_URL_S3=s.url, AWS_REGION="us-east-1",
               CTFIO_CACHE_DIR=str(tmp_path / "cache"), HOME=str(tmp_path))
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(k, None)
    t3 = "T" * 2999 + "3"
    t10 = "U" * 9999 + "0"
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = AKIDFILE\naws_secret_access_key = s\n"
        "aws_session_token = %s\n" % t10)
    for extra, token in [(dict(AWS_ACCESS_KEY_ID="AKIDENV", AWS_SECRET_ACCESS_KEY="s",
                               AWS_SESSION_TOKEN=t3), t3), ({}, t10)]:
        del s.requests[:]
        p = subprocess.run([sys.executable, "-m", "ctfio", "dump", "--file", "s3://bkt/d.ctf",
                            "--input", "x:2:dense", "--count", "3", "--randomize", "false"],
                           env=dict(env, **extra), capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        assert s.requests and all(r.headers.get("x-amz-security-token") == token
                                  for r in s.requests)


# --- Objects without ETags, and ETags in other forms ----------------------------------------


class Versions:
    """One object that a test replaces: version k has body bodies[k] and Last-Modified
    LMS[k] (and ETag etags[k], None: no header). `honour`: the server answers 412 to a stale
    If-Match or If-Unmodified-Since, as S3 does; else it ignores them."""

    LMS = [LM, "Tue, 01 Dec 2026 10:05:00 GMT"]

    def __init__(self, bodies, etags=(None, None), lm=True, honour=False):
        self.bodies, self.etags, self.lm, self.honour = bodies, etags, lm, honour
        self.cur = 0

    def __call__(self, req, n):
        k = self.cur
        body, etag = self.bodies[k], self.etags[k]
        lm = self.LMS[k] if self.lm else None
        if self.honour:
            im, ius = req.headers.get("if-match"), req.headers.get("if-unmodified-since")
            if (im and im != etag) or (ius and lm and ius != lm):
                return answer(412, ["Content-Length: 0"])
        return ranged(body, req, etag=etag, lm=lm)


def read_values(src, k=7):
    vals = []
    for _ in range(10000):
        mb = src.next_minibatch(k)
        if not mb:
            break
        for si in mb:
            vals += [tuple(v) for v in mb[si].values.tolist()]
    return vals


@pytest.mark.parametrize("kind", ["lm", "lm-412", "etag", "etag-412"])
def test_an_object_replaced_mid_sweep_is_a_change(serve, kind):
    """A same-size replacement after the first minibatch: the server's answers show it (a new
    Last-Modified or ETag), or the server refuses the condition sent (412); either way
    CTF_ECHANGED naming the object and saying it changed, never a mix of versions."""
    v = Versions([corpus_text(400), corpus_text(400, base=3)],
                 etags=('"e1"', '"e2"') if kind.startswith("etag") else (None, None),
                 honour=kind.endswith("412"))
    s = serve(v)
    src = source(s.url + "/d.ctf", prefetch_chunks=1)
    src.next_minibatch(7)
    v.cur = 1
    with pytest.raises(ctfio.DataChangedError) as e:
        read_all(src)
    msg = str(e.value)
    assert "/d.ctf" in msg and "changed" in msg and "ended early" not in msg
    if kind == "lm":
        assert "Last-Modified" in msg
    loads = [r for r in s.requests if r.range() and r.range() != (0, 0)]
    if kind.startswith("lm"):
        assert loads and all(r.headers.get("if-unmodified-since") == LM for r in loads)
    else:
        assert loads and all(r.headers.get("if-match") == '"e1"' for r in loads)


def test_index_and_chunk_caches_know_a_replaced_object_without_etag(serve, tmp_path):
    """No ETag, a same-size replacement with a new Last-Modified: the next reader neither
    takes the old index cache nor the old chunks from the chunk cache."""
    bodies = [corpus_text(200), corpus_text(200, base=3)]
    v = Versions(bodies)
    s = serve(v)
    caches = dict(cache_dir=str(tmp_path / "idx"), chunk_cache=str(tmp_path / "chunks"))

    def run():
        src = ctfio.MinibatchSource(ctfio.CTFDeserializer(s.url + "/d.ctf", XY),
                                    storage_options=dict(backoff_ms=1), randomize=False,
                                    max_sweeps=1, chunk_size_in_bytes=200, **caches)
        return read_values(src)

    def local(body):
        p = tmp_path / "local.ctf"
        p.write_bytes(body)
        return read_values(ctfio.MinibatchSource(ctfio.CTFDeserializer(str(p), XY),
                                                 randomize=False, max_sweeps=1,
                                                 chunk_size_in_bytes=200))

    assert run() == local(bodies[0])
    v.cur = 1
    assert run() == local(bodies[1])


def test_a_checkpoint_is_refused_on_a_replaced_object_without_etag(serve):
    v = Versions([corpus_text(200), corpus_text(200, base=3)])
    s = serve(v)
    src = source(s.url + "/d.ctf")
    src.next_minibatch(7)
    state = src.get_checkpoint_state()
    v.cur = 1
    src2 = source(s.url + "/d.ctf")
    with pytest.raises(ctfio.StateError) as e:
        src2.restore_from_checkpoint(state)
    assert "/d.ctf" in str(e.value)


@pytest.mark.parametrize("headers", ["lm", "none"])
def test_cbf_over_a_server_without_etags(serve, tmp_path, headers):
    ctf = tmp_path / "d.ctf"
    ctf.write_bytes(corpus_text(200))
    out = tmp_path / "d.bin"
    ctfio.convert(str(ctf), str(out), format="cbf", streams=XY, chunk_size=300,
                  show_config=False)
    body = out.read_bytes()
    s = serve(lambda req, n: ranged(body, req, etag=None, lm=LM if headers == "lm" else None))
    src = ctfio.MinibatchSource(ctfio.CBFDeserializer(s.url + "/d.bin"), randomize=False,
                                max_sweeps=1, storage_options=dict(backoff_ms=1),
                                cache_dir=False)
    ref = ctfio.MinibatchSource(ctfio.CBFDeserializer(str(out)), randomize=False,
                                max_sweeps=1)
    assert read_values(src) == read_values(ref)


def test_etags_that_differ_in_quotes_or_weak_prefix_name_one_version(serve):
    """The probe's ETag W/"v1", the ranges' "v1" and v1: one version; a weak ETag is never
    sent as If-Match (whose strong comparison it would always fail)."""
    body = corpus_text()
    forms = ['W/"v1"', '"v1"', "v1"]

    def h(req, n):
        if req.headers.get("if-match"):
            return answer(412, ["Content-Length: 0"])
        return ranged(body, req, etag=forms[min(n - 1, 1) if n < 3 else n % 3])

    s = serve(h)
    assert read_all(source(s.url + "/d.ctf")) == list(range(NUM))


# --- Messages that name what happened, and never a credential --------------------------------


def test_a_huge_header_line_is_named(serve):
    body = corpus_text()
    s = serve(lambda req, n: ranged(body, req, extra=["X-Big: " + "a" * 200000]))
    msg = fails(s.url + "/d.ctf")
    assert "header line" in msg and "out of memory reading" not in msg
    assert len(s.requests) == 1


def test_stray_bytes_on_a_reused_connection_are_retried(serve):
    """Bytes after a complete answer (a broken server's) sit on the pooled connection: the next
    request there reads them first; it is retried on a fresh connection and the data is
    right."""
    body = corpus_text()
    s = serve(lambda req, n: [ranged(body, req), ("sleep", 0.05), b"GARBAGE\r\n"])
    src = source(s.url + "/d.ctf", storage_options=dict(max_retries=3))
    assert read_all(src) == list(range(NUM))
    assert src._reader.io_counters()["retries"] >= 1
    msg = fails(s.url + "/d.ctf", storage_options=dict(max_retries=0))
    assert "not HTTP" in msg and "after 1 attempts" in msg


def test_plain_http_403_says_no_more_than_it_knows(serve):
    s = serve(lambda req, n: answer(403, [], b"<html>Forbidden</html>"))
    msg = fails(s.url + "/d.ctf")
    assert "403" in msg and "signature" not in msg


def test_user_and_password_of_a_url_are_never_printed(serve, tmp_path):
    import subprocess
    body = corpus_text()
    s = serve(lambda req, n: ranged(body, req) if req.target == "/d.ctf" else
              answer(404, [], b""))
    base = "http://reader:S3CRETPW@127.0.0.1:%d" % s.port
    msg = fails(base + "/missing.ctf")
    assert "404" in msg and "S3CRETPW" not in msg and "reader:" not in msg
    assert "127.0.0.1:%d/missing.ctf" % s.port in msg
    # The credentials did go out (as basic authentication).
    assert any(r.headers.get("authorization", "").startswith("Basic ") for r in s.requests)
    for cmd in ("stats", "check"):
        p = subprocess.run([sys.executable, "-m", "ctfio", cmd, "--file", base + "/d.ctf",
                            "--input", "x:2:dense", "--cache-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        out = p.stdout + p.stderr
        assert "/d.ctf" in out and "S3CRETPW" not in out, out


def test_a_presigned_url_is_a_path_and_its_query_is_never_printed(serve):
    body = corpus_text()
    q = "?X-Amz-Credential=AKID%2F20261201&X-Amz-Signature=deadbeefSIGNATURE&X-Amz-Expires=60"

    def h(req, n):
        if req.target == "/d.ctf" + q:
            return ranged(body, req)
        return answer(403, [], b"<Error><Code>SignatureDoesNotMatch</Code></Error>")

    s = serve(h)
    assert read_all(source(s.url + "/d.ctf" + q)) == list(range(NUM))
    msg = fails(s.url + "/other.ctf" + q)
    assert "403" in msg and "deadbeefSIGNATURE" not in msg and "AKID" not in msg
    assert "/other.ctf?***" in msg


def test_listing_and_get_etags_in_other_forms_name_one_version(serve):
    """A listing that gives the ETag without quotes (or weak) and ranges that give it quoted:
    one version, read whole."""
    body = corpus_text()

    def h(req, n):
        if "list-type=2" in req.target:
            xml = ("<?xml version=\"1.0\"?><ListBucketResult><Name>bkt</Name>"
                   "<IsTruncated>false</IsTruncated><Contents><Key>d.ctf</Key>"
                   "<ETag>W/&quot;v1&quot;</ETag><Size>%d</Size></Contents>"
                   "<Contents><Key>e.ctf</Key><ETag>v1</ETag><Size>%d</Size></Contents>"
                   "</ListBucketResult>" % (len(body), len(body)))
            return answer(200, ["Content-Type: application/xml"], xml.encode())
        return ranged(body, req, etag='"v1"')

    s = serve(h)
    keys = read_all(source("s3://bkt/*.ctf", storage_options=s3_opts(s)))
    assert sorted(keys) == sorted(list(range(NUM)) * 2)

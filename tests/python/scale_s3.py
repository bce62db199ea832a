"""A small S3-compatible server on 127.0.0.1 for tests and benchmarks at scale: a bucket of N
keys whose contents are generated from the key itself, so nothing is stored and N can be a
million. It answers what ctfio's remote reader asks of S3: ListObjectsV2 pages (prefix,
continuation token, max-keys; ETag and Size of each key) and GETs with a Range. Every request
is counted by kind (``counts``), so a test can say how many an open or a sweep took.

    with ScaleS3(num_keys=10_000) as srv:
        src = ctfio.MinibatchSource(ctfio.CTFDeserializer(srv.pattern, streams),
                                    storage_options=srv.options())
        srv.counts  # {"list": pages, "get": GETs}

Keys are ``shards/part-NNNNNNN.ctf``; key i holds ``rows`` lines ``|x i j`` (j = 0..rows-1), one
sequence each. Signatures are not checked (requests may be anonymous).
"""

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

BUCKET = "scale"
PAGE = 1000


class ScaleS3:
    def __init__(self, num_keys, rows=2, page=PAGE):
        self.num_keys, self.rows, self.page = num_keys, rows, page
        self.counts = {"list": 0, "get": 0, "other": 0}
        self.keep_log, self.log = False, []   # keep_log: (key, Range) of every GET
        self.lock = threading.Lock()
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: with Nagle's algorithm the second waits
            # for the client's delayed ACK (40 ms a request).
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_GET(self):
                srv._get(self)

            def do_HEAD(self):
                srv._count("other")
                self._reply(405, b"")

            def _reply(self, status, body, headers=()):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.endpoint = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.pattern = "s3://%s/shards/part-*.ctf" % BUCKET
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    # -- the data ---------------------------------------------------------------------------

    def key(self, i):
        return "shards/part-%07d.ctf" % i

    def content(self, key):
        i = int(re.search(r"(\d+)\.ctf$", key).group(1))
        return "".join("|x %d %d\n" % (i, j) for j in range(self.rows)).encode()

    def etag(self, key):
        return '"%s"' % hashlib.md5(self.content(key)).hexdigest()

    # -- the server -------------------------------------------------------------------------

    def _count(self, kind):
        with self.lock:
            self.counts[kind] += 1

    def _get(self, h):
        url = urlsplit(h.path)
        path = unquote(url.path).lstrip("/")
        bucket, _, key = path.partition("/")
        if bucket != BUCKET:
            self._count("other")
            return h._reply(404, b"<Error><Code>NoSuchBucket</Code></Error>")
        if not key:
            self._count("list")
            return self._list(h, parse_qs(url.query))
        self._count("get")
        if self.keep_log:
            with self.lock:
                self.log.append((key, h.headers.get("Range")))
        m = re.match(r"shards/part-(\d{7})\.ctf$", key)
        if not m or int(m.group(1)) >= self.num_keys:
            return h._reply(404, b"<Error><Code>NoSuchKey</Code></Error>")
        body = self.content(key)
        headers = [("ETag", self.etag(key)), ("Accept-Ranges", "bytes")]
        rng = re.match(r"bytes=(\d+)-(\d*)$", h.headers.get("Range") or "")
        if not rng:
            return h._reply(200, body, headers)
        first = int(rng.group(1))
        last = min(int(rng.group(2)) if rng.group(2) else len(body) - 1, len(body) - 1)
        if first >= len(body):
            return h._reply(416, b"", headers + [("Content-Range", "bytes */%d" % len(body))])
        headers.append(("Content-Range", "bytes %d-%d/%d" % (first, last, len(body))))
        return h._reply(206, body[first:last + 1], headers)

    def _list(self, h, q):
        prefix = q.get("prefix", [""])[0]
        token = q.get("continuation-token", [None])[0]
        limit = min(int(q.get("max-keys", [self.page])[0]), self.page)
        # Keys are "shards/part-NNNNNNN.ctf" in order: a listing is a range of numbers.
        start = int(token) if token else 0
        if not "shards/part-".startswith(prefix[:12]) and not prefix.startswith("shards/part-"):
            start = self.num_keys
        keys = []
        i = start
        while i < self.num_keys and len(keys) < limit:
            k = self.key(i)
            if k.startswith(prefix):
                keys.append(k)
            i += 1
        more = i < self.num_keys
        parts = ["<?xml version=\"1.0\" encoding=\"UTF-8\"?>",
                 "<ListBucketResult><Name>%s</Name><Prefix>%s</Prefix><KeyCount>%d</KeyCount>"
                 "<MaxKeys>%d</MaxKeys><IsTruncated>%s</IsTruncated>"
                 % (BUCKET, escape(prefix), len(keys), limit, "true" if more else "false")]
        if more:
            parts.append("<NextContinuationToken>%d</NextContinuationToken>" % i)
        for k in keys:
            parts.append("<Contents><Key>%s</Key><Size>%d</Size><ETag>%s</ETag></Contents>"
                         % (escape(k), len(self.content(k)), escape(self.etag(k))))
        parts.append("</ListBucketResult>")
        h._reply(200, "".join(parts).encode(), [("Content-Type", "application/xml")])

    # -- use --------------------------------------------------------------------------------

    def options(self, **kw):
        return dict({"endpoint": self.endpoint, "anon": True, "max_retries": 2}, **kw)

    def reset(self):
        with self.lock:
            for k in self.counts:
                self.counts[k] = 0
            self.log.clear()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

"""A real S3 server on 127.0.0.1 for the remote-data tests: moto's server mode started in this
process, IAM authentication switched on (every request's Signature V4 is checked), plus a small
fault-injecting proxy of our own in front of it.

The proxy forwards each request unchanged (the Host header too, so that signatures still hold)
and, while a fault plan is queued, answers the next matching requests with a fault instead:
``503`` (SlowDown), ``500``, ``429``, ``cut`` (the headers of the real answer, then half of its
body and a closed connection) or ``reset`` (the connection closed before any answer).
"""

import http.client
import json
import logging
import socket
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

logging.getLogger("werkzeug").setLevel(logging.WARNING)

POLICY_ALL = json.dumps({"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3:
    """moto on 127.0.0.1 with two IAM users: ``key``/``secret`` may do anything on S3,
    ``weak_key``/``weak_secret`` nothing. ``client`` is a boto3 S3 client of the first."""

    def __init__(self):
        import boto3
        from moto.server import ThreadedMotoServer
        self.port = free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        self.endpoint = "http://127.0.0.1:%d" % self.port
        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name="us-east-1",
                           aws_access_key_id="setup", aws_secret_access_key="setup")
        iam.create_user(UserName="reader")
        iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=POLICY_ALL)
        k = iam.create_access_key(UserName="reader")["AccessKey"]
        self.key, self.secret = k["AccessKeyId"], k["SecretAccessKey"]
        iam.create_user(UserName="weak")
        k = iam.create_access_key(UserName="weak")["AccessKey"]
        self.weak_key, self.weak_secret = k["AccessKeyId"], k["SecretAccessKey"]
        # From here on every request must be signed by a known key with the right secret.
        # (The server runs in this process: its settings are switched here directly.)
        from moto import settings
        from moto.core.authorization import ActionAuthenticatorMixin
        settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
        ActionAuthenticatorMixin.request_count = 0
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                   aws_access_key_id=self.key, aws_secret_access_key=self.secret)

    def options(self, endpoint=None, **kw):
        d = dict(endpoint=endpoint or self.endpoint, key=self.key, secret=self.secret,
                 region="us-east-1", backoff_ms=5)
        d.update(kw)
        return d

    def env(self, endpoint=None):
        return {"AWS_ENDPOINT_URL_S3": endpoint or self.endpoint, "AWS_ACCESS_KEY_ID": self.key,
                "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_REGION": "us-east-1"}

    def stop(self):
        # moto's state lives in this process: forget the users and buckets and switch the
        # authentication off again, so that a later S3() of another test module starts clean.
        import urllib.request

        from moto import settings
        settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")
        urllib.request.urlopen(urllib.request.Request(self.endpoint + "/moto-api/reset",
                                                      method="POST"), timeout=30).read()
        self.server.stop()


class FaultProxy:
    """A forwarding proxy on 127.0.0.1 that injects the queued faults into range GETs."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.plan = []           # faults still to inject, in order
        self.injected = []       # faults injected so far
        self.seen = []           # (method, path with query) of every request, in order
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                with proxy.lock:
                    proxy.seen.append(("HEAD", self.path))
                self.send_response(405)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self):
                fault = None
                with proxy.lock:
                    proxy.seen.append(("GET", self.path))
                if "Range" in self.headers:
                    with proxy.lock:
                        if proxy.plan:
                            fault = proxy.plan.pop(0)
                            if fault:
                                proxy.injected.append(fault)
                if fault == "reset":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault in ("503", "500", "429"):
                    code = {"503": "SlowDown", "500": "InternalError", "429": "SlowDown"}[fault]
                    body = ("<Error><Code>%s</Code><Message>injected</Message></Error>"
                            % code).encode()
                    self.send_response(int(fault))
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.target_port, timeout=30)
                conn.request("GET", self.path, headers=dict(self.headers.items()))
                r = conn.getresponse()
                body = r.read()
                conn.close()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if fault == "cut":
                    self.wfile.write(body[:len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.endpoint = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def inject(self, plan):
        """plan: faults in order; None lets one request through."""
        with self.lock:
            self.plan = list(plan)
            self.injected = []

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


socketserver.TCPServer.allow_reuse_address = True


class RangeServer:
    """A plain HTTP server (no S3, no signatures) serving ``files`` (path -> bytes) with range
    requests and an ETag: what a static web server offers."""

    def __init__(self, files):
        self.files = files
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                body = srv.files.get(self.path)
                if body is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                etag = '"%08x"' % (hash(body) & 0xffffffff)
                rng = self.headers.get("Range")
                if rng:
                    a, b = rng.split("=")[1].split("-")
                    a, b = int(a), min(int(b), len(body) - 1)
                    if a >= len(body):
                        self.send_response(416)
                        self.send_header("Content-Range", "bytes */%d" % len(body))
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    part = body[a:b + 1]
                    self.send_response(206)
                    self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, len(body)))
                else:
                    part = body
                    self.send_response(200)
                self.send_header("ETag", etag)
                self.send_header("Content-Length", str(len(part)))
                self.end_headers()
                self.wfile.write(part)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

"""A server that stops answering is not waited for: Ctrl-C during next_minibatch and close()
return at once, whatever the requests' timeouts (20 s here, retried twice: a wait for them
would take a minute).

The server is a raw-socket HTTP server of this file on 127.0.0.1 that serves one CTF object by
range requests until told to hang; then it reads each request and never answers it (each such
connection is held until the test stops the server). The reader runs in a subprocess, which
gets a real SIGINT and reports what it saw (times, threads and descriptors) as JSON lines.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

N = 2000
DATA = "".join("%d |x %d %d\n" % (i, i % 7, i % 11) for i in range(N)).encode()


class HangServer:
    """GET /data.ctf with Range, until ``hang`` is set; then requests are read, counted in
    ``stuck`` and never answered. At most 2,000 requests are answered; every wait is bounded."""

    def __init__(self):
        self.hang = threading.Event()
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.answered = 0
        self.stuck = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.url = "http://127.0.0.1:%d/data.ctf" % self.sock.getsockname()[1]
        self.threads = []
        self.main = threading.Thread(target=self._accept, daemon=True)
        self.main.start()

    def _accept(self):
        while not self.stop_ev.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _serve(self, conn):
        conn.settimeout(0.1)
        buf = b""
        try:
            while not self.stop_ev.is_set():
                while b"\r\n\r\n" not in buf:
                    try:
                        chunk = conn.recv(65536)
                    except socket.timeout:
                        if self.stop_ev.is_set():
                            return
                        continue
                    if not chunk:
                        return
                    buf += chunk
                head, buf = buf.split(b"\r\n\r\n", 1)
                if self.hang.is_set():
                    with self.lock:
                        self.stuck += 1
                    self.stop_ev.wait(120)
                    return
                with self.lock:
                    self.answered += 1
                    if self.answered > 2000:
                        return
                rng = [l for l in head.split(b"\r\n") if l.lower().startswith(b"range:")]
                a, b = 0, len(DATA) - 1
                if rng:
                    lo, hi = rng[0].split(b"=")[1].split(b"-")
                    a, b = int(lo), min(int(hi), len(DATA) - 1)
                part = DATA[a:b + 1]
                conn.sendall(b"HTTP/1.1 206 Partial Content\r\nETag: \"v1\"\r\n"
                             b"Content-Range: bytes %d-%d/%d\r\nContent-Length: %d\r\n\r\n%s"
                             % (a, b, len(DATA), len(part), part))
        except OSError:
            return
        finally:
            conn.close()

    def wait_stuck(self, more_than, timeout=10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if self.stuck > more_than:
                    return True
            time.sleep(0.01)
        return False

    def stop(self):
        self.stop_ev.set()
        self.main.join(5)
        for t in self.threads:
            t.join(5)
        self.sock.close()


CHILD = r"""
import json, os, sys, time
import ctfio
url = sys.argv[1]
XY = dict(x=ctfio.StreamDef(shape=2))
def counts():
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))
def source():
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(url, XY), randomization_window_in_chunks=2,
        chunk_size_in_bytes=400, num_threads=2, cache_dir=False,
        storage_options=dict(max_retries=2, timeout_ms=20000, backoff_ms=5))
def say(**kw):
    print(json.dumps(kw), flush=True)
# A first reader, read and closed while the server answers: what stays loaded afterwards
# (libcurl, the interpreter's threads) is in the counts below.
s = source()
s.next_minibatch(10)
s.close()
base = counts()
mode = sys.stdin.readline().strip()
s = source()
if mode == "close":
    s.next_minibatch(%(big)d)  # the read-ahead of the next such call starts now
say(event="ready")
sys.stdin.readline()  # the server hangs from here on (mode close: a request is stuck)
if mode == "sigint":
    say(event="calling")
    try:
        s.next_minibatch(%(big)d)
        say(event="returned")
    except KeyboardInterrupt as e:
        say(event="interrupted", context=repr(e.__context__))
t0 = time.monotonic()
s.close()
close_s = time.monotonic() - t0
say(event="closed", close_s=close_s, base=base, after=counts())
"""


def run_child(mode):
    srv = HangServer()
    # The child imports ctfio as this process does (the installed package, or PYTHONPATH).
    p = subprocess.Popen([sys.executable, "-c", CHILD % {"big": 2 * N}, srv.url],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    events = {}
    watchdog = threading.Timer(120, p.kill)  # bounds every read below
    watchdog.start()
    try:
        def read_event():
            line = p.stdout.readline()
            assert line, p.stderr.read()[-3000:]
            ev = json.loads(line)
            events[ev["event"]] = ev
            return ev

        p.stdin.write(mode + "\n")
        p.stdin.flush()
        assert read_event()["event"] == "ready"
        stuck0 = srv.stuck
        srv.hang.set()
        if mode == "sigint":
            p.stdin.write("go\n")
            p.stdin.flush()
            assert read_event()["event"] == "calling"
        # A request of the reader's is now waiting on the server: next()'s own, or the
        # read-ahead's after the last next() returned.
        assert srv.wait_stuck(stuck0)
        if mode == "sigint":
            time.sleep(0.5)  # from "calling" to inside next(): a few bytecodes
        t0 = time.monotonic()
        if mode == "sigint":
            p.send_signal(signal.SIGINT)
            ev = read_event()
            events["interrupt_s"] = time.monotonic() - t0
            assert ev["event"] == "interrupted", ev
        else:
            p.stdin.write("go\n")
            p.stdin.flush()
        ev = read_event()
        assert ev["event"] == "closed", ev
        assert p.wait(30) == 0, p.stderr.read()[-3000:]
        events["requests"] = srv.answered + srv.stuck
        events["stuck"] = srv.stuck
        return events
    finally:
        watchdog.cancel()
        if p.poll() is None:
            p.kill()
            p.wait()
        srv.stop()


def test_ctrl_c_during_next_returns_at_once():
    ev = run_child("sigint")
    # KeyboardInterrupt within about a second, the cancelled request as its context.
    assert ev["interrupt_s"] < 3.0, ev
    assert "cancelled" in ev["interrupted"]["context"], ev
    closed = ev["closed"]
    assert closed["close_s"] < 2.0, ev
    # No thread and no descriptor left behind by the cancelled reader.
    assert closed["after"] == closed["base"], ev


def test_close_does_not_wait_for_a_stuck_read_ahead():
    ev = run_child("close")
    closed = ev["closed"]
    assert closed["close_s"] < 2.0, ev
    assert closed["after"] == closed["base"], ev

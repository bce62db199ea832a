"""Provider reading threads and the GIL: samples per second of a pure-Python generator
(CPU-bound: it parses text) and of one that waits on I/O (time.sleep stands in for storage or
the network), with 1, 2 and 4 reading threads, in one process.

    .venv/bin/python bench/provider_threads.py
"""
import sys
import time

from ctfio.paddle import dense_vector, integer_value, provider

LINE = "3;" + " ".join("0.%d" % (i % 10) for i in range(64))
FILES = ["f%d" % k for k in range(8)]


def make(wait):
    @provider(input_types={"x": dense_vector(64), "y": integer_value(10)}, should_shuffle=False)
    def process(settings, filename):
        for _ in range(2000 if not wait else 50):
            if wait:
                time.sleep(0.002)
            label, values = LINE.split(";")
            yield {"x": [float(v) for v in values.split()], "y": int(label)}
    return process


def rate(process, threads):
    dp = process(FILES, batch_size=256, num_threads=threads, open_files=8)
    t0 = time.perf_counter()
    n = sum(b.num_samples for b in dp)
    dt = time.perf_counter() - t0
    dp.close()
    return n / dt


def main():
    rows = []
    for name, wait in (("CPU-bound generator", False), ("I/O-waiting generator", True)):
        base = None
        for threads in (1, 2, 4):
            best = max(rate(make(wait), threads) for _ in range(3))
            base = base or best
            rows.append((name, threads, best, best / base))
    print("| generator | num_threads | samples/s | vs 1 thread |")
    print("|---|---|---|---|")
    for name, threads, r, ratio in rows:
        print("| %s | %d | %.0f | %.2f |" % (name, threads, r, ratio))
    return 0


if __name__ == "__main__":
    sys.exit(main())

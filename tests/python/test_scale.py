"""Many shards behind one pattern, on a server of our own (tests/python/scale_s3.py: N keys
whose contents come from the key, nothing stored): what an open and a sweep cost, counted in
requests. A warm open (index caches filled) lists and asks nothing of the objects; a sweep
reads each object's chunk once."""

import pytest
from scale_s3 import PAGE, ScaleS3

import ctfio

N = 2500   # three listing pages
XS = ctfio.StreamDefs(x=ctfio.StreamDef(shape=2))


@pytest.fixture(scope="module")
def server():
    with ScaleS3(N) as srv:
        yield srv


def open_and_sweep(srv, cache_dir):
    srv.reset()
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer(srv.pattern, XS),
                                storage_options=srv.options(), cache_dir=str(cache_dir),
                                max_sweeps=1)
    at_open = dict(srv.counts)
    keys = []
    while True:
        mb = src.next_minibatch(1000)
        if not mb:
            break
        keys += mb[src.streams.x].values[:, 0].astype(int).tolist()
    io = src._reader.io_counters()
    src.close()
    return at_open, dict(srv.counts), sorted(keys), io


def test_open_and_sweep_of_many_shards_count_their_requests(server, tmp_path):
    pages = -(-N // PAGE)
    want = sorted(i for i in range(N) for _ in range(server.rows))
    # Cold: the listing, then each object's first bytes (its size, ETag and format) and its
    # whole body (the index); the sweep reads its one chunk once (the data crosses the network
    # twice in a cold first sweep: once for the index, once for the chunk).
    at_open, total, keys, io = open_and_sweep(server, tmp_path)
    assert keys == want
    assert at_open == {"list": pages, "get": 2 * N, "other": 0}
    assert total == {"list": pages, "get": 3 * N, "other": 0}
    assert io["requests"] == pages + 3 * N and io["retries"] == 0
    # Warm: the listing alone opens (its ETags match the cached indexes): at most the listing
    # pages and one more request; the sweep reads each object's chunk once.
    at_open, total, keys, io = open_and_sweep(server, tmp_path)
    assert keys == want
    assert at_open["get"] == 0 and at_open["list"] <= pages + 1
    assert total == {"list": at_open["list"], "get": N, "other": 0}

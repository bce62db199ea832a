"""Cache directories are the user's own (docs/chunk-cache.md, "Trust").

* a chunk cache directory made by the reader is 0700 and its entries 0600, whatever the umask;
* one writable by others (0777, 01777) or owned by another user (os.chown, as root) is ignored
  with one warning through the log sink: nothing is read from it or written to it, and the data
  is the same;
* the writer Python uses for its own files keeps the C writer's rules: a planted link is never
  followed.
"""

import os
import stat

import pytest
from test_chunk_cache import entries, perf, read, render, source

import ctfio


@pytest.fixture
def data(tmp_path):
    p = tmp_path / "train.ctf"
    p.write_text(render(300, 5))
    return str(p)


def warnings_of(logs):
    return [a[1] for a in logs if a[0] == 1]


def test_a_new_cache_directory_and_its_entries_are_private(data, tmp_path):
    cache = str(tmp_path / "a" / "cc")
    old = os.umask(0)
    try:
        read(source(data, chunk_cache=cache))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    names = entries(cache)
    assert len(names) > 3
    assert {stat.S_IMODE(os.stat(os.path.join(cache, n)).st_mode) for n in names} == {0o600}


def populated(data, tmp_path):
    cache = str(tmp_path / "cc")
    ref = read(source(data, chunk_cache=cache))
    return cache, ref, entries(cache)


def check_ignored(data, cache, ref, names, why):
    logs = []
    src = source(data, chunk_cache=cache, log=lambda *a: logs.append(a))
    assert read(src) == ref
    p = perf(src)
    assert p["chunk_cache_hits"] == 0 and p["chunk_cache_misses"] == 0
    w = warnings_of(logs)
    assert len(w) == 1 and cache in w[0] and why in w[0] and "not used" in w[0], w
    assert entries(cache) == names


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770])
def test_a_directory_others_can_write_is_ignored(data, tmp_path, mode):
    cache, ref, names = populated(data, tmp_path)
    os.chmod(cache, mode)
    check_ignored(data, cache, ref, names, "writable by")
    os.chmod(cache, 0o700)
    src = source(data, chunk_cache=cache)
    assert read(src) == ref and perf(src)["chunk_cache_hits"] > 0


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a directory to another user needs root")
@pytest.mark.parametrize("mode", [0o755, 0o777])
def test_a_directory_another_user_owns_is_ignored(data, tmp_path, mode):
    cache, ref, names = populated(data, tmp_path)
    os.chown(cache, 12345, 12345)
    os.chmod(cache, mode)
    check_ignored(data, cache, ref, names, "owned by another user")


def test_the_python_writer_never_follows_a_planted_link(tmp_path):
    np = pytest.importorskip("numpy")
    victim = tmp_path / "victim"
    victim.write_text("mine")
    os.chmod(victim, 0o600)
    out = tmp_path / "out.ctf"
    planted = [str(out) + ".part"] + ["%s.%d-%s.part" % (out, os.getpid() + k, "0" * 16)
                                      for k in range(8)]
    for p in planted:
        os.symlink(str(victim), p)
    old = os.umask(0o027)
    try:
        assert ctfio.write_ctf(str(out), {"a": np.ones((3, 2))}) == 3
    finally:
        os.umask(old)
    assert victim.read_text() == "mine" and stat.S_IMODE(os.stat(victim).st_mode) == 0o600
    assert all(os.path.islink(p) for p in planted)
    assert stat.S_IMODE(os.lstat(out).st_mode) == 0o640 and out.read_text().count("|a") == 3
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["victim", "out.ctf"] + [os.path.basename(p) for p in planted])

"""A local CBF file rewritten or cut short under a running reader: what was loaded never changes
(a chunk is the reader's own copy of the file's bytes, not a mapping of them), and a changed
file is ``DataChangedError`` at the next load, as for CTF text; truncation is that error too,
never a crash (run in a child process, so that a signal shows as a failure, not as a lost
test run)."""
import os
import subprocess
import sys
import textwrap

import numpy as np

import ctfio

ROWS = 2000
DIM = 4


def write_cbf(tmp_path, name, sign, rows=ROWS, chunk_size=1200):
    """`rows` one-sample sequences of DIM floats, every value sign * (row + 1): the two versions
    of the file have the same layout and size and differ in every value."""
    ctf = str(tmp_path / (name + ".ctf"))
    with open(ctf, "w") as f:
        for i in range(rows):
            f.write("|x " + " ".join("%d" % (sign * (i + 1)) for _ in range(DIM)) + "\n")
    out = str(tmp_path / (name + ".bin"))
    streams = ctfio.StreamDefs(x=ctfio.StreamDef(field="x", shape=DIM))
    ctfio.convert(ctf, out, format="cbf", streams=streams, chunk_size=chunk_size,
                  show_config=False)
    return out


def rewrite_in_place(path, new):
    """Overwrites path's bytes (same inode, as `cp new path` does) and gives it a modification
    time one second later than it had, so that the change is seen whatever the clock's step."""
    st = os.stat(path)
    with open(new, "rb") as f:
        data = f.read()
    assert len(data) == st.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert os.stat(path).st_ino == st.st_ino


def source(path, **kw):
    return ctfio.MinibatchSource(ctfio.CBFDeserializer(path), randomize=False, **kw)


def values(src, mb):
    return mb[src.streams["x"]].asarray().reshape(-1, DIM)


def test_loaded_chunks_do_not_change_when_the_file_is_rewritten(tmp_path):
    data = write_cbf(tmp_path, "data", 1)
    v2 = write_cbf(tmp_path, "v2", -1)
    src = source(data, max_sweeps=1, prefetch_chunks=2)
    got = [values(src, src.next_minibatch(10))]
    rewrite_in_place(data, v2)
    changed = None
    try:
        while True:
            mb = src.next_minibatch(10)
            if not mb:
                break
            got.append(values(src, mb))
    except ctfio.DataChangedError as e:
        changed = e
    rows = np.concatenate(got)
    # The rest of the loaded chunks is the first version's, row for row; the change is said.
    assert changed is not None, "a rewritten file was read to the end without an error"
    assert "changed" in str(changed)
    assert len(rows) >= 10 and len(rows) < ROWS
    expect = np.repeat(np.arange(1, len(rows) + 1, dtype=np.float32)[:, None], DIM, axis=1)
    assert np.array_equal(rows, expect)


def test_data_kept_in_memory_does_not_change_when_the_file_is_rewritten(tmp_path):
    data = write_cbf(tmp_path, "data", 1)
    v2 = write_cbf(tmp_path, "v2", -1)
    src = source(data, max_sweeps=2, keep_data_in_memory=True)
    first = np.concatenate([values(src, src.next_minibatch(ROWS // 4)) for _ in range(4)])
    assert len(first) == ROWS
    rewrite_in_place(data, v2)
    # Every chunk is held: the second sweep needs no load and delivers what the first did (its
    # first minibatch may have been made ahead, before the rewrite; the others were not).
    second = np.concatenate([values(src, src.next_minibatch(ROWS // 4)) for _ in range(4)])
    assert np.array_equal(first, second)
    assert not src.next_minibatch(ROWS)


# The file is cut to its first page while the first chunks (three pages each, of 40) are loaded:
# the rest of them is delivered as it was loaded, the next load says the file changed.
CHILD = textwrap.dedent("""
    import os, sys
    import numpy as np
    import ctfio
    path = sys.argv[1]
    src = ctfio.MinibatchSource(ctfio.CBFDeserializer(path), randomize=False, max_sweeps=1,
                                prefetch_chunks=2)
    info = src.streams["x"]
    rows = [src.next_minibatch(10)[info].asarray().reshape(-1, 4)]
    os.truncate(path, 4096)
    try:
        while True:
            mb = src.next_minibatch(10)
            if not mb:
                break
            rows.append(mb[info].asarray().reshape(-1, 4))
    except ctfio.DataChangedError as e:
        got = np.concatenate(rows)
        ok = np.array_equal(got[:, 0], np.arange(1, len(got) + 1, dtype=np.float32))
        print("changed after %d rows (%s): %s" % (len(got), "right" if ok else "WRONG", e))
        sys.exit(0 if ok else 4)
    print("no error")
    sys.exit(3)
""")


def test_a_file_cut_short_under_the_reader_is_an_error_not_a_crash(tmp_path):
    data = write_cbf(tmp_path, "data", 1, rows=20000, chunk_size=12000)
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", CHILD, data], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "changed after" in r.stdout and "right" in r.stdout

"""ctfio.mix: several data sets interleaved on one timeline (docs/rules.md, section 17).

Part p's keys are p * 10000 + i, so every delivered key names its part. The property tests
(hypothesis) draw files, weights, minibatch-size schedules, worker counts and checkpoint points,
and check that the data do not depend on any of them, that proportions hold at every prefix and
that a restore continues exactly.
"""
import json
import random

import numpy as np
import pytest

import ctfio
from ctfio import CTFDeserializer, MinibatchSource, StreamDef

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

PROFILE = settings(derandomize=True, database=None, deadline=None, print_blob=False,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                          HealthCheck.function_scoped_fixture])


def part_text(p, n, maxlen, seed):
    """n sequences of 1..maxlen samples; x = (key, line) dense dim 2, y sparse dim 10."""
    rnd = random.Random(seed)
    lines = []
    for i in range(n):
        key = p * 10000 + i
        for j in range(rnd.randint(1, maxlen)):
            lines.append("%d |x %d %d |y %d:1\n" % (key, key, j, rnd.randint(0, 9)))
    return "".join(lines)


def streams():
    return dict(x=StreamDef(shape=2), y=StreamDef(shape=10, is_sparse=True))


def write_parts(tmp_path, sizes, maxlens, seed=0):
    paths = []
    for p, (n, m) in enumerate(zip(sizes, maxlens)):
        path = tmp_path / ("part%d.ctf" % p)
        path.write_text(part_text(p, n, m, seed + p))
        paths.append(str(path))
    return paths


def open_mix(paths, weights, **kw):
    kw.setdefault("randomization_window_in_chunks", 3)
    kw.setdefault("chunk_size_in_bytes", 200)
    kw.setdefault("randomization_seed", 5)
    parts = [CTFDeserializer(p, streams()) for p in paths]
    return MinibatchSource(ctfio.mix(parts, weights=weights), **kw)


def read_seqs(src, sizes, n=1, r=0, limit=10**6):
    """[(minibatch index, key, samples)] over a schedule of minibatch sizes (cycled)."""
    out, i = [], 0
    while i < limit:
        mb = src.next_minibatch(sizes[i % len(sizes)], number_of_workers=n, worker_rank=r)
        if not mb:
            break
        x = mb[src.streams.x]
        for key, length in zip(x.keys, x.lengths):
            out.append((i, int(key), int(length)))
        i += 1
    return out


# ---------------------------------------------------------------------------------------------
# The API
# ---------------------------------------------------------------------------------------------

def test_mix_interleaves_parts_by_weight(tmp_path):
    paths = write_parts(tmp_path, [30, 20], [3, 2])
    src = open_mix(paths, [0.7, 0.3], max_samples=300)
    assert src.files == paths
    seqs = read_seqs(src, [16])
    taken = [0, 0]
    total = 0
    for _i, key, length in seqs:
        taken[key // 10000] += length
        total += length
        # within one longest sequence (scaled) of the share at every prefix
        d = max(3 / 0.7, 2 / 0.3)
        assert abs(taken[0] - total * 0.7) <= 0.7 * d + 1e-9
        assert abs(taken[1] - total * 0.3) <= 0.3 * d + 1e-9
    assert total >= 300 and taken[1] > 0
    state = src.get_checkpoint_state()
    assert state["samples_per_sweep"] == 0
    assert sum(int(v) for v in state["mix_positions"].split(";")) == total


def test_each_part_reads_as_alone(tmp_path):
    paths = write_parts(tmp_path, [25, 40], [4, 2])
    src = open_mix(paths, [1, 3], max_samples=400)
    seqs = read_seqs(src, [7])
    for p, path in enumerate(paths):
        alone = MinibatchSource(CTFDeserializer(path, streams()),
                                randomization_window_in_chunks=3, chunk_size_in_bytes=200,
                                randomization_seed=5)
        mine = [(k, n) for _i, k, n in seqs if k // 10000 == p]
        got = read_seqs(alone, [1], limit=len(mine))
        assert mine == [(k, n) for _i, k, n in got]


def test_parts_may_be_a_join_and_a_corpus(tmp_path):
    # part 0: x and y in two files joined by key; part 1: a corpus of two files
    text0 = part_text(0, 12, 2, 1)
    (tmp_path / "jx.ctf").write_text("".join(l.split(" |y")[0] + "\n" for l in
                                             text0.splitlines()))
    (tmp_path / "jy.ctf").write_text("".join(l.split(" |x")[0] + " |y" + l.split(" |y")[1] + "\n"
                                             for l in text0.splitlines()))
    (tmp_path / "whole0.ctf").write_text(text0)
    text1 = part_text(1, 10, 3, 2).splitlines(keepends=True)
    cut = next(i for i in range(len(text1) // 2, len(text1))
               if text1[i].split()[0] != text1[i - 1].split()[0])
    (tmp_path / "c1.ctf").write_text("".join(text1[:cut]))
    (tmp_path / "c2.ctf").write_text("".join(text1[cut:]))
    (tmp_path / "whole1.ctf").write_text("".join(text1))
    join = [CTFDeserializer(str(tmp_path / "jx.ctf"), dict(x=StreamDef(shape=2))),
            CTFDeserializer(str(tmp_path / "jy.ctf"), dict(y=StreamDef(shape=10,
                                                                       is_sparse=True)))]
    corpus = CTFDeserializer([str(tmp_path / "c1.ctf"), str(tmp_path / "c2.ctf")], streams())
    kw = dict(randomize=False, max_sweeps=1)
    mixed = MinibatchSource(ctfio.mix([join, corpus], weights=[1, 1]), **kw)
    plain = MinibatchSource(ctfio.mix([CTFDeserializer(str(tmp_path / "whole0.ctf"), streams()),
                                       CTFDeserializer(str(tmp_path / "whole1.ctf"), streams())],
                                      weights=[1, 1]), **kw)
    a = mixed.next_minibatch(10**6)
    b = plain.next_minibatch(10**6)
    for name in ("x", "y"):
        ma, mb = a[mixed.streams[name]], b[plain.streams[name]]
        assert list(ma.keys) == list(mb.keys)
        assert list(ma.lengths) == list(mb.lengths)
        assert np.array_equal(ma.values, mb.values)
        if name == "y":
            assert np.array_equal(ma.indptr, mb.indptr)
            assert np.array_equal(ma.indices, mb.indices)
    assert not mixed.next_minibatch(10)


def test_weight_zero_and_one_part(tmp_path):
    paths = write_parts(tmp_path, [15, 15], [2, 2])
    src = open_mix(paths, [0, 2], max_samples=100)
    assert all(k // 10000 == 1 for _i, k, _n in read_seqs(src, [9]))
    one = open_mix(paths[:1], [0.25], max_sweeps=2)
    alone = MinibatchSource(CTFDeserializer(paths[0], streams()),
                            randomization_window_in_chunks=3, chunk_size_in_bytes=200,
                            randomization_seed=5, max_sweeps=2)
    assert read_seqs(one, [5]) == read_seqs(alone, [5])
    with pytest.raises(ValueError, match="weight > 0"):
        open_mix(paths, [0, 0])
    with pytest.raises(ValueError, match="2 weights for 1 parts"):
        ctfio.mix([CTFDeserializer(paths[0], streams())], weights=[1, 2])
    with pytest.raises(ValueError, match="mix part 1"):
        MinibatchSource(ctfio.mix([CTFDeserializer(paths[0], streams()),
                                   CTFDeserializer(paths[1], dict(x=StreamDef(shape=2)))]))


def test_sweep_of_a_mix_and_full_data_sweep_epochs(tmp_path):
    paths = write_parts(tmp_path, [10, 30], [1, 1])
    src = open_mix(paths, [1, 1], max_sweeps=1)
    seqs = read_seqs(src, [4])
    keys1 = [k for _i, k, _n in seqs if k // 10000 == 1]
    assert sorted(keys1) == [10000 + i for i in range(30)]  # the slow part: once
    keys0 = [k for _i, k, _n in seqs if k // 10000 == 0]
    assert len(keys0) == 30  # the fast part went through three sweeps
    for s in range(3):
        assert sorted(keys0[10 * s:10 * s + 10]) == list(range(10))


def test_checkpoint_restore_and_changed_part(tmp_path):
    paths = write_parts(tmp_path, [30, 20, 25], [3, 2, 4])
    w = [0.5, 0.2, 0.3]
    src = open_mix(paths, w, max_samples=500)
    read_seqs(src, [11], limit=9)
    state = src.get_checkpoint_state()
    rest = read_seqs(src, [11])
    again = open_mix(paths, w, max_samples=500)
    again.restore_from_checkpoint(json.dumps(state))
    assert read_seqs(again, [11]) == rest
    # elastic: two workers share the rest
    shares = []
    for r in range(2):
        s = open_mix(paths, w, max_samples=500)
        s.restore_from_checkpoint(state)
        shares += [(i, k) for i, k, _n in read_seqs(s, [11], n=2, r=r)]
    assert sorted(shares) == sorted((i, k) for i, k, _n in rest)
    # a changed part is refused by name
    (tmp_path / "part1.ctf").write_text(part_text(1, 20, 2, 99))
    changed = open_mix(paths, w, max_samples=500)
    with pytest.raises(ctfio.StateError, match="mix part 1 .*part1.ctf"):
        changed.restore_from_checkpoint(state)


def test_from_config_file(tmp_path):
    paths = write_parts(tmp_path, [12, 12], [2, 2])
    cfg = tmp_path / "mix.cntk"
    cfg.write_text(
        "reader = {\n"
        "  randomizationWindow = 3 ; randomizationSeed = 5 ; chunkSizeInBytes = 200\n"
        "  maxSamples = 120\n"
        "  input = { x = { dim = 2 ; format = \"dense\" } ; "
        "            y = { dim = 10 ; format = \"sparse\" } }\n"
        "  mix = ( { file = \"%s\" ; weight = 3 } : { file = \"%s\" ; weight = 1 } )\n"
        "}\n" % (paths[0], paths[1]))
    src = MinibatchSource.from_config(str(cfg))
    want = open_mix(paths, [3, 1], max_samples=120)
    assert read_seqs(src, [10]) == read_seqs(want, [10])


def test_cli_mix(tmp_path):
    import subprocess
    import sys
    paths = write_parts(tmp_path, [5, 5], [1, 1])
    out = subprocess.run([sys.executable, "-m", "ctfio", "dump", "--mix", "1:" + paths[0],
                          "--mix", "1:" + paths[1], "--input", "x:2:dense",
                          "--input", "y:10:sparse", "--mb", "2", "--count", "3",
                          "--randomize", "false"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    keys = [s["key"] for line in out for s in json.loads(line)["sequences"]]
    assert keys == [0, 10000, 1, 10001, 2, 10002]


def test_torch_dataset_epochs_and_resume(tmp_path):
    torch = pytest.importorskip("torch")
    import ctfio.torch as ct
    paths = write_parts(tmp_path, [20, 9], [3, 2])

    def factory():
        return open_mix(paths, [2, 1], num_threads=0)

    def keys(batches):
        return [b["_keys"].tolist() for b in batches]

    def run(ds, epochs):
        return [b for _ in range(epochs) for b in ds]

    full = run(ct.CTFIterableDataset(factory, 10, with_keys=True), 2)
    # an epoch of FULL_DATA_SWEEP is one sweep of the mix: every key of both parts at least once
    seen, n = set(), 0
    for b in full:
        seen.update(b["_keys"].tolist())
        n += 1
        if seen >= set(range(20)) | set(range(10000, 10009)):
            break
    assert n < len(full)
    a = ct.CTFIterableDataset(factory, 10, with_keys=True)
    head = []
    for i, b in enumerate(a):
        head.append(b)
        if i == 4:
            break
    state = json.loads(json.dumps(a.state_dict()))
    assert "mix_positions" in state["source"]
    b = ct.CTFIterableDataset(factory, 10, with_keys=True)
    b.load_state_dict(state)
    rest = [x for _ in range(2) for x in b]
    assert keys(head + rest) == keys(full)
    for x, y in zip(head + rest, full):
        assert torch.equal(x["x"], y["x"])


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------

@st.composite
def mix_case(draw):
    nparts = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 25)) for _ in range(nparts)]
    maxlens = [draw(st.integers(1, 4)) for _ in range(nparts)]
    weights = [draw(st.sampled_from([0, 0.5, 1, 2, 3.5])) for _ in range(nparts)]
    if not any(weights):
        weights[draw(st.integers(0, nparts - 1))] = 1
    return dict(sizes=sizes, maxlens=maxlens, weights=weights,
                seed=draw(st.integers(0, 50)),
                window=draw(st.integers(1, 4)), chunk=draw(st.sampled_from([60, 200, 4096])),
                randomize=draw(st.booleans()),
                schedule=draw(st.lists(st.integers(1, 40), min_size=1, max_size=4)),
                workers=draw(st.integers(1, 3)),
                threads=draw(st.sampled_from([0, 2])),
                stop=draw(st.integers(1, 12)))


def _src(paths, c, **kw):
    return open_mix(paths, c["weights"], randomization_window_in_chunks=c["window"],
                    chunk_size_in_bytes=c["chunk"], randomization_seed=c["seed"],
                    randomize=c["randomize"], max_samples=250, num_threads=c["threads"], **kw)


@settings(PROFILE, max_examples=40)
@given(c=mix_case())
def test_property_mix_determinism(tmp_path_factory, c):
    d = tmp_path_factory.mktemp("mixprop")
    paths = write_parts(d, c["sizes"], c["maxlens"], c["seed"])
    base = [(k, n) for _i, k, n in read_seqs(_src(paths, c), [1])]
    # proportions within the bound at every prefix
    W = sum(c["weights"])
    D = max(m / w for m, w in zip(c["maxlens"], c["weights"]) if w > 0)
    taken, total = [0] * len(paths), 0
    for k, n in base:
        taken[k // 10000] += n
        total += n
        for p, w in enumerate(c["weights"]):
            assert abs(taken[p] - total * w / W) <= w * D + 1e-9
    # any minibatch-size schedule: the same sequence order
    assert [(k, n) for _i, k, n in read_seqs(_src(paths, c), c["schedule"])] == base
    # workers: the shares of each step together are the global minibatch
    glob = read_seqs(_src(paths, c), c["schedule"])
    shares = []
    for r in range(c["workers"]):
        shares += read_seqs(_src(paths, c), c["schedule"], n=c["workers"], r=r)
    assert sorted(shares) == sorted(glob)
    # a restore after any step continues identically
    src = _src(paths, c)
    head = read_seqs(src, c["schedule"], limit=c["stop"])
    state = src.get_checkpoint_state()
    tail = read_seqs(src, c["schedule"])
    again = _src(paths, c)
    again.restore_from_checkpoint(state)
    assert read_seqs(again, c["schedule"]) == tail
    assert [(k, n) for _i, k, n in head + tail] == base

"""Skipping a stretch of the timeline: MinibatchSource.skip, the torch dataset's and the
training session's skip, the CLI's --skip. Each one equals the run that delivered and discarded
those samples, on every rank, before and after an elastic restore."""

import json
import os
import subprocess

import pytest
import torch  # noqa: F401

import ctfio.torch as ct
from ctfio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
from ctfio.training import training_session

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dense_source(f, **kw):
    kw.setdefault("chunk_size_in_bytes", 5 * f.line_bytes)
    kw.setdefault("randomize", True)
    kw.setdefault("randomization_seed", 5)
    kw.setdefault("cache_index", False)
    return MinibatchSource(CTFDeserializer(f.path, StreamDefs(
        features=StreamDef(field="x", shape=2), labels=StreamDef(field="y", shape=3))), **kw)


def keys(src, mb):
    return [] if not mb else [int(k) for k in mb[src.streams.features].keys]


def ranks_keys(srcs, k, calls):
    """Per call, each rank's keys of next_minibatch(k)."""
    n = len(srcs)
    return [[keys(s, s.next_minibatch(k, num_data_partitions=n, partition_index=r))
             for r, s in enumerate(srcs)] for _ in range(calls)]


@pytest.mark.parametrize("n", [3, 12, 70])
def test_skip_equals_discarded_on_every_rank(dense_file, n):
    ref = [dense_source(dense_file) for _ in range(2)]
    ranks_keys(ref, n, 1)                      # delivered and discarded
    want = ranks_keys(ref, 7, 12)
    got = [dense_source(dense_file) for _ in range(2)]
    for s in got:
        s.skip(n)
    assert ranks_keys(got, 7, 12) == want
    states = [s.get_checkpoint_state() for s in got]
    assert states[0] == states[1]
    assert states[0]["skipped"] == "0-%d" % n and states[0]["skipped_samples"] == n


def test_skip_after_elastic_restore(dense_file):
    two = [dense_source(dense_file) for _ in range(2)]
    ranks_keys(two, 12, 4)
    state = two[0].get_checkpoint_state()
    assert state == two[1].get_checkpoint_state()
    ref = [dense_source(dense_file) for _ in range(3)]
    for s in ref:
        s.restore_from_checkpoint(state)
    ranks_keys(ref, 25, 1)
    want = ranks_keys(ref, 9, 10)
    three = [dense_source(dense_file) for _ in range(3)]
    for s in three:
        s.restore_from_checkpoint(state)
        s.skip(25)
    after = [s.get_checkpoint_state() for s in three]
    assert all(a == after[0] for a in after) and after[0]["skipped"] == "48-73"
    assert ranks_keys(three, 9, 10) == want
    # The list travels with the state: restored elsewhere (2 ranks again), it stays.
    back = dense_source(dense_file)
    back.restore_from_checkpoint(after[0])
    assert back.get_checkpoint_state()["skipped"] == "48-73"


def test_skip_over_whole_chunks_reads_nothing(dense_file):
    src = dense_source(dense_file, randomize=False, num_threads=0, prefetch_chunks=0)
    src.skip(20)                               # chunks of 5 one-sample sequences
    perf = src.stats()["perf"]
    assert perf["chunks_loaded"] == 0 and perf["parse_bytes"] == 0 and perf["reads"] == 0
    assert keys(src, src.next_minibatch(3)) == [20, 21, 22]


def test_skip_refused_with_truncation(seq_file):
    src = MinibatchSource(CTFDeserializer(seq_file.path, StreamDefs(
        features=StreamDef(field="x", shape=3))), truncation_length=2, randomize=False)
    with pytest.raises(ValueError, match="truncation_length"):
        src.skip(4)


def dataset_keys(ds, batches):
    out = []
    for b in ds:
        out.append(b["_keys"].tolist())
        if len(out) == batches:
            break
    return out


def test_torch_dataset_skip(dense_file):
    def factory():
        return dense_source(dense_file)
    for w in range(2):
        ref = ct.CTFIterableDataset(factory, 8, with_keys=True, number_of_workers=2,
                                    worker_rank=w, epoch_size=ct.INFINITELY_REPEAT)
        dataset_keys(ref, 3)                   # 24 samples delivered and discarded
        state = ref.state_dict()
        dataset_keys(ref, 2)                   # 16 more, discarded
        want = dataset_keys(ref, 4)
        ds = ct.CTFIterableDataset(factory, 8, with_keys=True, number_of_workers=2,
                                   worker_rank=w, epoch_size=ct.INFINITELY_REPEAT)
        ds.load_state_dict(state)
        ds.skip(16)
        assert ds.state_dict()["source"]["skipped"] == "24-40"
        assert dataset_keys(ds, 4) == want
        # Later checkpoints still say what was skipped.
        assert ds.state_dict()["source"]["skipped"] == "24-40"


def test_training_session_skip(dense_file):
    def run(skip):
        seen = []
        src = dense_source(dense_file)
        s = training_session(src, lambda data, info: seen.append(
            [int(k) for k in data[src.streams.features].keys]), mb_size=6, max_samples=30,
            progress=False)
        if skip:
            s.skip(skip)
        s.train()
        return seen, src.get_checkpoint_state()
    full, _ = run(0)
    skipped, state = run(12)
    assert skipped[:3] == full[2:5]
    assert state["skipped"] == "0-12"


def test_cli_skip(dense_file):
    exe = os.path.join(ROOT, "build", "ctfio")
    if not os.path.exists(exe):
        pytest.skip("build/ctfio not built")
    base = [exe, "dump", "--file", dense_file.path, "--input", "x:2:dense", "--mb", "4",
            "--count", "3", "--state"]
    full = subprocess.run(base[:-3] + ["--count", "6"], capture_output=True, text=True,
                          check=True).stdout.splitlines()
    got = subprocess.run(base + ["--skip", "12"], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    def mbs(lines):
        out = [json.loads(ln) for ln in lines if not ln.startswith("state ")]
        for m in out:
            del m["index"]   # the dump's own count
        return out
    assert mbs(got) == mbs(full)[3:6]
    last = json.loads([ln for ln in got if ln.startswith("state ")][-1][6:])
    assert last["skipped"] == "0-12"


def test_skip_mid_run_with_read_ahead(dense_file):
    """A skip after minibatches were delivered (the next one read ahead on the threads)
    starts from the caller's position, not the read-ahead's."""
    ref = [dense_source(dense_file, num_threads=2) for _ in range(2)]
    head = ranks_keys(ref, 6, 3)
    ranks_keys(ref, 10, 1)
    want = ranks_keys(ref, 6, 8)
    got = [dense_source(dense_file, num_threads=2) for _ in range(2)]
    assert ranks_keys(got, 6, 3) == head
    for s in got:
        s.skip(10)
    assert ranks_keys(got, 6, 8) == want
    assert got[0].get_checkpoint_state()["skipped"] == "18-28"

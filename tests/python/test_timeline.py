"""The minibatch carries its timeline (position, sweep, global samples, end of sweep, samples
per sweep) for every kind of source; training_session and ctfio.torch read it instead of the
checkpoint state, follow the same epoch rules (ctfio/_loop.py), and agree on every boundary.
Also: the library's rules reach Python unchanged (limits, defaults, validation, warnings)."""

import logging
import os
import random
import subprocess

import numpy as np
import pytest

import ctfio
from ctfio import FULL_DATA_SWEEP, INFINITELY_REPEAT
from ctfio.provider import integer_value, provider

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_sequences(path, n=50, seed=3):
    """n sequences of 1..4 samples: dense x (dim 2) on every sample."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for s in range(n):
            for i in range(rng.randint(1, 4)):
                f.write("%d |x %d %d\n" % (s, s, i))
    return path


def ctf_source(path, **kw):
    kw.setdefault("randomization_window_in_chunks", 3)
    kw.setdefault("chunk_size_in_bytes", 128)
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(path, ctfio.StreamDefs(x=ctfio.StreamDef(shape=2))),
        randomization_seed=5, **kw)


@pytest.fixture
def seq_file(tmp_path):
    return write_sequences(str(tmp_path / "seq.ctf"))


# ---------------------------------------------------------------------------------------------
# The timeline on every source's minibatch
# ---------------------------------------------------------------------------------------------

def test_ctf_minibatch_carries_the_timeline(seq_file):
    src = ctf_source(seq_file)
    per = src._reader.index_info()["samples"]
    pos = 0
    for _ in range(40):
        mb = src.next_minibatch(13)
        md = mb[src.streams.x]
        state = src.get_checkpoint_state()
        assert md.position == state["minibatchSourcePosition"]
        assert md.global_samples == md.position - pos
        assert md.samples_per_sweep == per == state["samples_per_sweep"]
        assert md.sweep == pos // per             # the sweep of its first sequence
        assert md.end_of_sweep == (md.position // per > pos // per)
        pos = md.position


def test_workers_share_the_timeline(seq_file):
    a, b = ctf_source(seq_file), ctf_source(seq_file)
    for _ in range(20):
        ma = a.next_minibatch(9, number_of_workers=2, worker_rank=0)[a.streams.x]
        mb = b.next_minibatch(9, number_of_workers=2, worker_rank=1)[b.streams.x]
        assert (ma.position, ma.global_samples, ma.sweep, ma.end_of_sweep) == \
            (mb.position, mb.global_samples, mb.sweep, mb.end_of_sweep)


def test_in_memory_source_carries_the_timeline():
    x = [np.full((k % 3 + 1, 2), k, np.float32) for k in range(20)]
    src = ctfio.MinibatchSourceFromData(dict(x=x))
    per = sum(len(s) for s in x)
    pos = 0
    for _ in range(15):
        md = src.next_minibatch(7, number_of_workers=2, worker_rank=1)[src.streams.x]
        assert md.position == src.get_checkpoint_state()["position"]
        assert md.global_samples == md.position - pos
        assert (md.samples_per_sweep, md.sweep) == (per, pos // per)
        assert md.end_of_sweep == (md.position // per > pos // per)
        pos = md.position


def test_provider_and_user_minibatches_have_the_attributes():
    @provider(input_types={"id": integer_value(100)}, should_shuffle=False)
    def process(settings, filename):
        for i in range(10):
            yield [i]

    dp = process(["a"], batch_size=4)
    seen = []
    for _ in range(6):
        md = dp.next_minibatch(4)[dp.streams.id]
        seen.append((md.sweep, md.end_of_sweep, md.global_samples))
        assert md.position is None and md.samples_per_sweep is None   # a pass has no known size
    assert seen == [(0, False, 4), (0, False, 4), (0, True, 2), (1, False, 4), (1, False, 4),
                    (1, True, 2)]
    md = ctfio.MinibatchData(np.zeros((2, 3), np.float32), 2, 2, True)
    assert (md.position, md.sweep, md.global_samples, md.samples_per_sweep) == (None,) * 4
    assert md.end_of_sweep


# ---------------------------------------------------------------------------------------------
# The drivers read the timeline, not the checkpoint state, per minibatch
# ---------------------------------------------------------------------------------------------

class CountingStates:
    def __init__(self, src):
        self.calls = 0
        real = src.get_checkpoint_state

        def counted():
            self.calls += 1
            return real()
        src.get_checkpoint_state = counted


def test_training_session_reads_no_state_per_minibatch(seq_file):
    for workers in (1, 2):
        src = ctf_source(seq_file)
        c = CountingStates(src)
        steps = []
        ctfio.training_session(src, lambda d, i, steps=steps: steps.append(i.num_samples),
                               mb_size=5, epoch_size=FULL_DATA_SWEEP, max_epochs=3, progress=False,
                               number_of_workers=workers, worker_rank=0).train()
        assert len(steps) > 20 and c.calls <= 1


def test_torch_reads_no_state_per_minibatch(seq_file):
    ct = pytest.importorskip("ctfio.torch")
    src = ctf_source(seq_file)
    c = CountingStates(src)
    ds = ct.CTFIterableDataset(src, 5)
    batches = sum(1 for _ in ds) + sum(1 for _ in ds)
    assert batches > 20 and c.calls <= 2      # one per iteration
    # ... yet state_dict() is the source's state after the last batch handed out
    for i, _ in enumerate(ds):
        if i == 3:
            break
    got = ds.state_dict()["source"]
    ref = ctf_source(seq_file)
    ref.restore_from_checkpoint(got)
    assert got == ref.get_checkpoint_state()
    assert got["minibatchSourcePosition"] == ds.last_minibatch[src.streams.x].position


# ---------------------------------------------------------------------------------------------
# One epoch rule for both drivers
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("epoch_size", [FULL_DATA_SWEEP, 37])
@pytest.mark.parametrize("kind", ["ctf", "memory"])
def test_training_session_and_torch_agree_on_epochs(seq_file, epoch_size, kind):
    ct = pytest.importorskip("ctfio.torch")
    if kind == "ctf":
        make = lambda: ctf_source(seq_file)  # noqa: E731
    else:
        rng = random.Random(1)
        x = [np.full((rng.randint(1, 4), 2), k, np.float32) for k in range(50)]
        make = lambda: ctfio.MinibatchSourceFromData(dict(x=x))  # noqa: E731
    per = make()._timeline()[1]
    session = []   # (epoch, position after) per minibatch
    ctfio.training_session(
        make(), lambda d, i: session.append((i.epoch, next(iter(d.values())).position)),
        mb_size=7, epoch_size=epoch_size, max_epochs=3, progress=False).train()
    ds = ct.CTFIterableDataset(make(), 7, epoch_size=epoch_size)
    torch_side = []
    for epoch in range(3):
        for _ in ds:
            md = next(iter(ds.last_minibatch.values()))
            torch_side.append((epoch, md.position))
    assert session == torch_side
    ends = [max(p for e, p in session if e == k) for k in range(3)]
    if epoch_size == FULL_DATA_SWEEP:
        assert ends == [per, 2 * per, 3 * per]   # every epoch is exactly one sweep
    else:   # at the boundary, or past it by less than a sequence (a sequence is never split)
        assert all(k * 37 <= end < k * 37 + 4 for k, end in zip((1, 2, 3), ends)), ends


# ---------------------------------------------------------------------------------------------
# The library's rules, passed through
# ---------------------------------------------------------------------------------------------

def test_limits_pass_through_unchanged(seq_file):
    per = ctf_source(seq_file)._timeline()[1]
    for kw in (dict(max_samples=FULL_DATA_SWEEP), dict(max_sweeps=1),
               dict(max_sweeps=FULL_DATA_SWEEP)):
        src = ctf_source(seq_file, **kw)
        total = 0
        while True:
            mb = src.next_minibatch(10)
            if not mb:
                break
            total += mb[src.streams.x].global_samples
        assert total == per, kw
    src = ctf_source(seq_file, max_samples=INFINITELY_REPEAT, max_sweeps=INFINITELY_REPEAT)
    assert src.next_minibatch(10)
    with pytest.raises(ValueError, match="max_sweeps"):
        ctf_source(seq_file, max_samples=5, max_sweeps=1)   # the library's check
    with pytest.raises(ValueError, match="max_samples"):
        ctf_source(seq_file, max_samples=-3)


def test_chunk_size_zero_is_refused_everywhere(seq_file, tmp_path):
    with pytest.raises(ValueError, match="chunk_size_bytes"):
        ctf_source(seq_file, chunk_size_in_bytes=0)
    cli = os.path.join(ROOT, "build", "ctfio")
    if not os.path.exists(cli):
        pytest.skip("the CLI is not built (make)")
    p = subprocess.run([cli, "check", "--file", seq_file, "--input", "x:2:dense",
                        "--chunk-size", "0"], capture_output=True, text=True)
    assert p.returncode != 0 and "--chunk-size: must be a positive integer" in p.stderr


def test_defaults_come_from_the_library(seq_file):
    # Left out, num_threads / prefetch_chunks / chunk_size_in_bytes are not passed at all.
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer(seq_file, ctfio.StreamDefs(
        x=ctfio.StreamDef(shape=2))))
    assert not {"num_threads", "prefetch_chunks", "chunk_size_bytes"} & set(src._params)
    assert src.get_checkpoint_state()["chunk_size_bytes"] == 32 * 1024 * 1024
    assert src.next_minibatch(10)


def test_few_chunks_warning_reaches_python_logging(seq_file, caplog):
    src = ctf_source(seq_file, chunk_size_in_bytes=1 << 20)   # one chunk
    with caplog.at_level(logging.WARNING, logger="ctfio"):
        src.next_minibatch(5, number_of_workers=2, worker_rank=1)
    msgs = [r.getMessage() for r in caplog.records if r.name == "ctfio"]
    assert any("chunks for 2 workers" in m for m in msgs), msgs
    # a log callable still receives them instead
    got = []
    src = ctf_source(seq_file, chunk_size_in_bytes=1 << 20, log=lambda *a: got.append(a))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ctfio"):
        src.next_minibatch(5, number_of_workers=2, worker_rank=0)
    assert any("chunks for 2 workers" in a[1] for a in got)
    assert not [r for r in caplog.records if r.name == "ctfio"]


# ---------------------------------------------------------------------------------------------
# MinibatchSourceFromData follows the file reader's rules
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2, 3])
def test_in_memory_source_cuts_like_the_file_reader(tmp_path, workers):
    """The same sequences in memory and in a file read in order: the same minibatches on every
    worker (first sequence always taken, no look-ahead, across sweep ends, sequence i of a sweep
    to worker i mod N), the same timeline, the same checkpoint position."""
    rng = random.Random(11)
    lengths = [rng.randint(1, 5) for _ in range(23)]
    path = str(tmp_path / "same.ctf")
    with open(path, "w") as f:
        for i, n in enumerate(lengths):
            for j in range(n):
                f.write("%d |x %d %d\n" % (i, i, j))
    mem_data = [np.array([[i, j] for j in range(n)], np.float32) for i, n in enumerate(lengths)]
    for k in (1, 4, 7, 30):
        for rank in range(workers):
            ctf = ctf_source(path, randomize=False)
            mem = ctfio.MinibatchSourceFromData(dict(x=mem_data))
            for _ in range(25):
                a = ctf.next_minibatch(k, number_of_workers=workers, worker_rank=rank)
                b = mem.next_minibatch(k, number_of_workers=workers, worker_rank=rank)
                ma, mb = a[ctf.streams.x], b[mem.streams.x]
                assert [s[0, 0] for s in ma.as_sequences()] == \
                    [s[0, 0] for s in mb.as_sequences()], (k, rank)
                np.testing.assert_array_equal(ma.values, mb.values)
                for attr in ("position", "sweep", "global_samples", "samples_per_sweep",
                             "end_of_sweep", "num_samples", "num_sequences"):
                    assert getattr(ma, attr) == getattr(mb, attr), (attr, k, rank)
            assert ctf.get_checkpoint_state()["minibatchSourcePosition"] == \
                mem.get_checkpoint_state()["position"]


def test_torch_with_truncated_bptt_keeps_exact_states(seq_file):
    """With truncated BPTT a position does not determine the state: the dataset then keeps the
    source's state per minibatch, and a break + state_dict + resume continues exactly."""
    ct = pytest.importorskip("ctfio.torch")

    def make():
        return ctf_source(seq_file, truncation_length=2)
    ref = [b["x"].tolist() for _, b in zip(range(12), ct.CTFIterableDataset(
        make(), 4, epoch_size=INFINITELY_REPEAT))]
    assert not make()._positional_state
    ds = ct.CTFIterableDataset(make(), 4, epoch_size=INFINITELY_REPEAT)
    first = [b["x"].tolist() for _, b in zip(range(5), ds)]
    state = ds.state_dict()
    again = ct.CTFIterableDataset(make(), 4, epoch_size=INFINITELY_REPEAT)
    again.load_state_dict(state)
    rest = [b["x"].tolist() for _, b in zip(range(7), again)]
    assert first + rest == ref

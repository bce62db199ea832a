"""training_session: schedules, epochs, limits, checkpoint/resume, cross-validation, trainers,
workers -- over the CTF MinibatchSource, a UserMinibatchSource subclass and
MinibatchSourceFromData."""
import json
import os

import numpy as np
import pytest
import scipy.sparse as sp

import ctfio
from ctfio import (
    FULL_DATA_SWEEP,
    INFINITELY_REPEAT,
    CheckpointConfig,
    CrossValidationConfig,
    MinibatchData,
    StreamInformation,
    UserMinibatchSource,
    training_session,
)

N = 40  # sequences in the test data; sequence i has feature value i


# ---------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------

def _write(tmp_path, n=N, name="data.ctf", lengths=None):
    path = str(tmp_path / name)
    if lengths is None:
        x = np.arange(n, dtype=np.float32).reshape(n, 1)
    else:
        x = [np.full((lengths[i], 1), i, dtype=np.float32) for i in range(n)]
    y = sp.csr_matrix(np.eye(3, dtype=np.float32)[np.arange(n) % 3])
    ctfio.write_ctf(path, {"x": x, "y": y})
    return path


def ctf_source(path, randomize=True, **kw):
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(path, ctfio.StreamDefs(
            x=ctfio.StreamDef(field="x", shape=1),
            y=ctfio.StreamDef(field="y", shape=3, is_sparse=True))),
        randomize=randomize, randomization_seed=3, chunk_size_in_bytes=64,
        randomization_window_in_chunks=4, **kw)


class ShuffledSource(UserMinibatchSource):
    """N one-sample sequences (value i), each sweep in its own seeded order; position-based
    checkpoints, like the built-in sources."""

    def __init__(self, n=N, max_sweeps=None):
        super().__init__()
        self.n = n
        self.pos = 0
        self.max_sweeps = max_sweeps
        self.si_x = StreamInformation("x", 0, "dense", np.float32, (1,))
        self.si_y = StreamInformation("y", 1, "dense", np.float32, (3,))

    def stream_infos(self):
        return [self.si_x, self.si_y]

    def _order(self, sweep):
        return np.random.RandomState(100 + sweep).permutation(self.n)

    def next_minibatch(self, num_samples, number_of_workers=1, worker_rank=0, device=None):
        vals = []
        end = False
        while len(vals) < max(1, num_samples):
            sweep, i = divmod(self.pos, self.n)
            if self.max_sweeps is not None and sweep >= self.max_sweeps:
                break
            vals.append(self._order(sweep)[i])
            self.pos += 1
            if i == self.n - 1:
                end = True
        if not vals:
            return {}
        x = np.asarray(vals, np.float32).reshape(-1, 1)
        y = np.eye(3, dtype=np.float32)[np.asarray(vals) % 3]
        return {self.si_x: MinibatchData(x, len(vals), len(vals), end),
                self.si_y: MinibatchData(y, len(vals), len(vals), end)}

    def get_checkpoint_state(self):
        return {"pos": self.pos}

    def restore_from_checkpoint(self, state):
        self.pos = state["pos"]


def data_source(max_samples=INFINITELY_REPEAT):
    x = np.arange(N, dtype=np.float32).reshape(N, 1)
    y = np.eye(3, dtype=np.float32)[np.arange(N) % 3]
    return ctfio.MinibatchSourceFromData({"x": x, "y": y}, max_samples=max_samples)


def x_of(data):
    """The feature values (= sequence numbers) of a minibatch, in order."""
    for key, md in data.items():
        name = key.name if isinstance(key, StreamInformation) else key
        if name in ("x", "in_x"):
            return [int(v) for v in np.asarray(md.values).ravel()]
    raise AssertionError("no x stream in %r" % (data,))


@pytest.fixture(params=["ctf", "user", "data"])
def make_source(request, tmp_path):
    kind = request.param
    if kind == "ctf":
        path = _write(tmp_path)
        return lambda: ctf_source(path)
    if kind == "user":
        return lambda: ShuffledSource()
    data_source()  # skips when MinibatchSourceFromData is not available
    return data_source


class Recorder:
    """A step function that records everything and keeps a tiny 'model' as user state."""

    def __init__(self, fail_after=None):
        self.calls = []
        self.model = np.zeros(3)
        self.fail_after = fail_after

    def __call__(self, data, info):
        if self.fail_after is not None and len(self.calls) == self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        xs = x_of(data)
        self.calls.append((info.epoch, info.minibatch, info.samples_seen, info.mb_size,
                           info.request, tuple(xs)))
        self.model = self.model * 0.5 + np.array([sum(xs), len(xs), info.epoch])
        return float(len(xs))

    def save(self, state):
        return {"model": self.model, "calls": len(self.calls)}

    def load(self, state):
        self.model = state["user"]["model"]


def run(source, step, **kw):
    kw.setdefault("progress", False)
    return training_session(source, step, **kw).train()


# ---------------------------------------------------------------------------------------------
# Schedules, epochs, limits
# ---------------------------------------------------------------------------------------------

def test_schedule_sizes_per_epoch(make_source):
    rec = Recorder()
    s = run(make_source(), rec, mb_size=[4] * 2 + [8], epoch_size=16, max_samples=64)
    per_epoch = {}
    for epoch, _, _, mb_size, _request, xs in rec.calls:
        per_epoch.setdefault(epoch, []).append((mb_size, len(xs)))
    assert per_epoch == {0: [(4, 4)] * 4, 1: [(4, 4)] * 4, 2: [(8, 8)] * 2, 3: [(8, 8)] * 2}
    assert s.samples_seen == 64 and s.epoch == 4 and s.minibatches == 12
    assert [e["samples"] for e in s.epoch_results] == [16] * 4


def test_schedule_pairs_and_callable_equal_list(tmp_path):
    out = []
    for mb_size in ([4, 4, 8], [(2, 4), (1, 8)], lambda e: 4 if e < 2 else 8):
        rec = Recorder()
        run(ShuffledSource(), rec, mb_size=mb_size, epoch_size=16, max_samples=64)
        out.append(rec.calls)
    assert out[0] == out[1] == out[2]


def test_epoch_boundary_cuts_the_request(make_source):
    rec = Recorder()
    s = run(make_source(), rec, mb_size=4, epoch_size=10, max_samples=30)
    assert [c[4] for c in rec.calls] == [4, 4, 2] * 3
    assert [c[0] for c in rec.calls] == [0] * 3 + [1] * 3 + [2] * 3
    assert s.samples_seen == 30


def test_full_data_sweep_epochs(make_source):
    rec = Recorder()
    src = make_source()
    s = run(src, rec, mb_size=6, epoch_size=FULL_DATA_SWEEP, max_epochs=3)
    assert s.epoch == 3 and s.sweeps == 3
    seen = [x for c in rec.calls for x in c[5]]
    if isinstance(src, ShuffledSource):
        # A source without a timeline: every epoch closes with the minibatch that holds a
        # sweep end; sizes never change, minibatches cross the sweep boundary.
        assert all(c[3] == 6 and c[4] == 6 for c in rec.calls)
        ends = [c[1] for c in rec.calls if (c[2] + len(c[5])) // N > c[2] // N]
        last_of_epoch = [max(c[1] for c in rec.calls if c[0] == e) for e in range(3)]
        assert last_of_epoch == ends[:3]
    else:
        # The source reports its position: a request never crosses the sweep's end, so every
        # epoch is exactly one sweep (40 = 6 * 6 + 4), as in ctfio.torch.
        assert [c[4] for c in rec.calls] == [6] * 6 + [4] + [6] * 6 + [4] + [6] * 6 + [4]
        assert [sum(len(c[5]) for c in rec.calls if c[0] == e) for e in range(3)] == [N] * 3
    # every sequence seen once per sweep
    assert sorted(seen[:N]) == list(range(N))
    assert sorted(seen[N:2 * N]) == list(range(N))


def test_max_samples_is_exact_and_full_sweep(make_source):
    rec = Recorder()
    s = run(make_source(), rec, mb_size=7, max_samples=30, epoch_size=INFINITELY_REPEAT)
    assert [len(c[5]) for c in rec.calls] == [7, 7, 7, 7, 2] and s.samples_seen == 30
    assert s.epoch == 0
    rec = Recorder()
    s = run(make_source(), rec, mb_size=7, max_samples=FULL_DATA_SWEEP)
    seen = [x for c in rec.calls for x in c[5]]
    assert len(rec.calls) == 6 and s.sweeps == 1 and set(seen) == set(range(N))


def test_source_end_ends_training(tmp_path):
    rec = Recorder()
    s = run(ShuffledSource(max_sweeps=1), rec, mb_size=16, epoch_size=100)
    assert s.samples_seen == N and s.epoch == 0 and s.finished
    path = _write(tmp_path)
    rec = Recorder()
    s = run(ctf_source(path, max_sweeps=2), rec, mb_size=16)
    assert s.samples_seen == 2 * N and s.epoch == 2


def test_samples_counted_by_longest_stream_or_defining_stream(tmp_path):
    lengths = [1 + i % 3 for i in range(12)]          # x: 1..3 samples, y: one per sequence
    path = _write(tmp_path, n=12, lengths=lengths)
    streams = dict(x=ctfio.StreamDef(field="x", shape=1),
                   y=ctfio.StreamDef(field="y", shape=3, is_sparse=True))
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer(path, ctfio.StreamDefs(**streams)),
                                randomize=False)
    sizes = []
    s = run(src, lambda d, i: sizes.append(i.num_samples), mb_size=6, max_samples=sum(lengths))
    assert s.samples_seen == sum(lengths) == sum(sizes)
    streams["y"] = ctfio.StreamDef(field="y", shape=3, is_sparse=True, defines_mb_size=True)
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer(path, ctfio.StreamDefs(**streams)),
                                randomize=False)
    counts = []
    s = run(src, lambda d, i: counts.append(i.num_samples), mb_size=6, max_samples=12)
    assert counts == [6, 6] and s.samples_seen == 12


# ---------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------

def _session(source, rec, ckpt, **kw):
    kw.setdefault("mb_size", [4] * 2 + [8])
    kw.setdefault("epoch_size", 16)
    kw.setdefault("max_samples", 96)
    return training_session(source, rec, checkpoint_config=CheckpointConfig(ckpt),
                            on_checkpoint=rec.save, on_restore=rec.load, progress=False, **kw)


def test_resume_equals_uninterrupted(make_source, tmp_path):
    full = Recorder()
    _session(make_source(), full, str(tmp_path / "full.ckpt")).train()

    ckpt = str(tmp_path / "run.ckpt")
    first = Recorder(fail_after=9)   # dies in epoch 2, one minibatch after the epoch-1 checkpoint
    with pytest.raises(KeyboardInterrupt):
        _session(make_source(), first, ckpt).train()
    with open(ckpt) as f:
        state = json.load(f)
    assert state["session"]["samples_seen"] == 32 and state["session"]["epoch"] == 2
    assert state["user"]["calls"] == 8

    resumed = Recorder()                     # a fresh process: new source, new session
    s = _session(make_source(), resumed, ckpt)
    s.train()
    assert s.restored_from == ckpt
    assert full.calls[:9] == first.calls
    assert resumed.calls == full.calls[8:]
    np.testing.assert_array_equal(resumed.model, full.model)
    assert not [f for f in os.listdir(tmp_path) if ".tmp" in f]


def test_resume_after_max_samples_run(make_source, tmp_path):
    full = Recorder()
    _session(make_source(), full, str(tmp_path / "full.ckpt")).train()
    ckpt = str(tmp_path / "run.ckpt")
    part = Recorder()
    _session(make_source(), part, ckpt, max_samples=48).train()   # final checkpoint at 48
    rest = Recorder()
    _session(make_source(), rest, ckpt).train()
    assert part.calls + rest.calls == full.calls
    np.testing.assert_array_equal(rest.model, full.model)
    # a finished run restored again does nothing more
    again = Recorder()
    s = _session(make_source(), again, ckpt)
    s.train()
    assert again.calls == [] and s.samples_seen == 96


def test_checkpoint_frequency_restore_false_and_preserve_all(tmp_path):
    ckpt = str(tmp_path / "c.json")
    rec = Recorder()
    written = []
    s = training_session(ShuffledSource(), rec, mb_size=8, max_samples=50, progress=False,
                         epoch_size=INFINITELY_REPEAT,
                         checkpoint_config=CheckpointConfig(ckpt, frequency=20,
                                                            preserve_all=True),
                         on_checkpoint=lambda st: written.append(st["session"]["samples_seen"]))
    s.train()
    # requests are cut at the checkpoint points 20 and 40; a final one at the end
    assert [c[4] for c in rec.calls] == [8, 8, 4, 8, 8, 4, 8, 2]
    assert written == [20, 40, 50]
    assert sorted(f for f in os.listdir(tmp_path)) == ["c.json", "c.json.0", "c.json.1",
                                                       "c.json.2"]
    rec2 = Recorder()
    training_session(ShuffledSource(), rec2, mb_size=8, max_samples=50, progress=False,
                     epoch_size=INFINITELY_REPEAT,
                     checkpoint_config=CheckpointConfig(ckpt, frequency=20, restore=False)
                     ).train()
    assert rec2.calls == rec.calls


def test_user_state_with_arrays_round_trips(tmp_path):
    ckpt = str(tmp_path / "u.ckpt")
    w = np.random.RandomState(1).randn(4, 3).astype(np.float32)
    got = {}
    training_session(ShuffledSource(), lambda d, i: None, mb_size=8, max_samples=16,
                     progress=False, checkpoint_config=CheckpointConfig(ckpt),
                     on_checkpoint=lambda st: {"w": w, "lr": np.float64(0.1), "n": 3}).train()
    training_session(ShuffledSource(), lambda d, i: None, mb_size=8, max_samples=32,
                     progress=False, checkpoint_config=CheckpointConfig(ckpt),
                     on_restore=lambda st: got.update(st["user"])).train()
    assert got["w"].dtype == np.float32
    np.testing.assert_array_equal(got["w"], w)
    assert got["lr"] == 0.1 and got["n"] == 3


def test_bad_checkpoint_file(tmp_path):
    ckpt = tmp_path / "x.ckpt"
    ckpt.write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="not a ctfio training session checkpoint"):
        training_session(ShuffledSource(), lambda d, i: None, progress=False,
                         checkpoint_config=CheckpointConfig(str(ckpt))).train()


# ---------------------------------------------------------------------------------------------
# Cross-validation
# ---------------------------------------------------------------------------------------------

def test_cv_rewinds_each_time(tmp_path):
    path = _write(tmp_path, n=25, name="cv.ctf")
    cv_src = ctf_source(path)
    runs = {}

    def evaluate(data, info):
        runs.setdefault(info.cv_index, []).append(tuple(x_of(data)))
        return float(np.mean(x_of(data)))

    results = []
    s = run(ShuffledSource(), lambda d, i: None, mb_size=8, epoch_size=16, max_samples=64,
            cv_config=CrossValidationConfig(cv_src, mb_size=10, evaluate=evaluate,
                                            callback=lambda *a: results.append(a)))
    assert sorted(runs) == [0, 1, 2, 3]
    assert runs[0] == runs[1] == runs[2] == runs[3]
    assert sorted(x for mb in runs[0] for x in mb) == list(range(25))   # one sweep
    assert [r[0] for r in results] == [0, 1, 2, 3]
    assert all(abs(r[1] - 12.0) < 1e-9 and r[2] == 25 and r[3] == 3 for r in results)
    assert [r["samples_seen"] for r in s.cv_results] == [16, 32, 48, 64]


def test_cv_frequency_max_samples_and_stop(tmp_path):
    seen = []
    s = run(ShuffledSource(), lambda d, i: None, mb_size=8, max_samples=200,
            epoch_size=INFINITELY_REPEAT,
            cv_config=CrossValidationConfig(ShuffledSource(n=30), mb_size=4, frequency=24,
                                            max_samples=10,
                                            evaluate=lambda d, i: (seen.append(x_of(d)), 1.0)[1],
                                            callback=lambda idx, *a: idx < 1))
    # cv after 24 and 48 samples; the second callback returns False and stops training
    assert s.samples_seen == 48 and s.cv_index == 2
    assert [len(x) for x in seen] == [4, 4, 2] * 2 and seen[:3] == seen[3:]


def test_cv_source_must_differ():
    src = ShuffledSource()
    with pytest.raises(ValueError, match="another source"):
        run(src, lambda d, i: None, cv_config=CrossValidationConfig(src))


# ---------------------------------------------------------------------------------------------
# CNTK-style trainer
# ---------------------------------------------------------------------------------------------

class FakeTrainer:
    def __init__(self):
        self.seen = []
        self.w = 0.0
        self.previous_minibatch_loss_average = None
        self.previous_minibatch_evaluation_average = None
        self.saved = []

    def train_minibatch(self, arguments):
        x = np.asarray(arguments["in_x"].values).ravel()
        assert set(arguments) == {"in_x", "in_y"}
        self.seen.append(tuple(int(v) for v in x))
        self.w += float(x.sum())
        self.previous_minibatch_loss_average = float(x.mean())
        self.previous_minibatch_evaluation_average = 0.5
        return True

    def test_minibatch(self, arguments):
        return float(np.asarray(arguments["in_x"].values).mean())

    def save_checkpoint(self, filename, external_state=None):
        with open(filename, "w") as f:
            json.dump({"w": self.w, "n": len(self.seen), "ext": external_state or {}}, f)
        self.saved.append(filename)

    def restore_from_checkpoint(self, filename):
        with open(filename) as f:
            d = json.load(f)
        self.w = d["w"]
        return d["ext"]


def test_trainer_cntk_positional_call(tmp_path):
    src = ShuffledSource()
    t = FakeTrainer()
    lines = []
    s = training_session(t, src, 8, {"in_x": src.streams.x, "in_y": "y"}, 40, None,
                         CheckpointConfig(str(tmp_path / "t.ckpt")), progress=lines.append)
    assert isinstance(s, ctfio.TrainingSession)
    s.train()
    assert len(t.seen) == 5 and s.samples_seen == 40
    assert os.path.exists(t.saved[-1])
    assert any(line.startswith("epoch 1: 40 samples, 5 minibatches, loss") for line in lines)
    assert any(line.startswith("epoch 1: 40 samples") and "loss" in line
               for line in lines), lines


def test_trainer_keywords_resume_and_cv(tmp_path):
    ckpt = str(tmp_path / "t.ckpt")

    def make(t, max_samples):
        src = ShuffledSource()
        cv = CrossValidationConfig(minibatch_source=ShuffledSource(n=10), minibatch_size=5)
        return training_session(trainer=t, mb_source=src, mb_size=[4, 8], epoch_size=16,
                                max_samples=max_samples,
                                model_inputs_to_streams={"in_x": "x", "in_y": "y"},
                                checkpoint_config=CheckpointConfig(ckpt), cv_config=cv,
                                progress=False)

    full_t = FakeTrainer()
    full = make(full_t, 64)
    full.train()
    os.unlink(ckpt)
    a = FakeTrainer()
    make(a, 32).train()
    b = FakeTrainer()
    make(b, 64).train()
    assert a.seen + b.seen == full_t.seen
    assert b.w == full_t.w                      # restored through restore_from_checkpoint
    assert [r["metric"] for r in full.cv_results] == [4.5] * 4


# ---------------------------------------------------------------------------------------------
# Workers, progress, errors
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["ctf", "data"])
def test_workers_agree_on_boundaries(kind, tmp_path):
    if kind == "ctf":
        path = _write(tmp_path)
        make = lambda: ctf_source(path)   # noqa: E731
    else:
        make = data_source
    single = Recorder()
    run(make(), single, mb_size=[8, 12], epoch_size=20, max_samples=80)
    recs = []
    for rank in range(2):
        rec = Recorder()
        s = run(make(), rec, mb_size=[8, 12], epoch_size=20, max_samples=80,
                number_of_workers=2, worker_rank=rank)
        assert s.samples_seen == 80
        recs.append(rec)
    # both workers make the same requests and see the same epochs...
    assert [c[:5] for c in recs[0].calls] == [c[:5] for c in recs[1].calls] == \
        [c[:5] for c in single.calls]
    # ...and their minibatches together are the global ones
    for c0, c1, cs in zip(recs[0].calls, recs[1].calls, single.calls):
        assert sorted(c0[5] + c1[5]) == sorted(cs[5])


def test_aggregate_samples_hook():
    rec = Recorder()
    s = run(ShuffledSource(), rec, mb_size=4, max_samples=40, number_of_workers=2,
            worker_rank=0, aggregate_samples=lambda local: 2 * local,
            epoch_size=INFINITELY_REPEAT)
    assert s.samples_seen == 40 and len(rec.calls) == 5


def test_progress_lines_and_epoch_callbacks():
    lines = []
    ends = []
    per_mb = []
    run(ShuffledSource(), lambda d, i: {"loss": 1.0, "acc": 0.5}, mb_size=5, epoch_size=20,
        max_samples=40, progress=lines.append, progress_frequency=10,
        on_epoch_end=lambda r: ends.append((r.epoch, r.samples, r.minibatches)),
        callbacks=[lambda info: per_mb.append(info.minibatch)])
    assert ends == [(0, 20, 4), (1, 20, 4)]
    assert per_mb == list(range(8))
    assert lines.count("  10 samples, 2 minibatches, loss 1, acc 0.5") == 1
    assert sum(line.startswith("epoch ") for line in lines) == 2


def test_plain_progress_prints(capsys):
    run(ShuffledSource(), lambda d, i: 2.0, mb_size=10, epoch_size=20, max_samples=20,
        progress="plain")
    assert "epoch 1: 20 samples, 2 minibatches, loss 2" in capsys.readouterr().out


def test_stop_from_step_and_on_epoch_end():
    s = run(ShuffledSource(), lambda d, i: i.stop() if i.minibatch == 2 else None, mb_size=4)
    assert s.minibatches == 3 and not s.finished
    s = run(ShuffledSource(), lambda d, i: None, mb_size=4, epoch_size=8,
            on_epoch_end=lambda r: r.epoch < 1)
    assert s.epoch == 2 and s.samples_seen == 16


@pytest.mark.parametrize("kw, err", [
    (dict(mb_size=0), ValueError),
    (dict(mb_size=[]), ValueError),
    (dict(mb_size=[4, "x"]), TypeError),  # a wrong type is a TypeError
    (dict(epoch_size=-3), ValueError),
    (dict(max_samples=-1), ValueError),
    (dict(checkpoint_config="file"), TypeError),
    (dict(worker_rank=2, number_of_workers=2), ValueError),
])
def test_bad_arguments(kw, err):
    with pytest.raises(err):
        training_session(ShuffledSource(), lambda d, i: None, **kw)


def test_needs_step_or_trainer_and_a_source():
    with pytest.raises(ValueError, match="step"):
        training_session(ShuffledSource())
    with pytest.raises(TypeError, match="mb_source"):
        training_session(object(), lambda d, i: None)
    with pytest.raises(ValueError):
        CheckpointConfig("")
    with pytest.raises(ValueError):
        CrossValidationConfig()


_TQDM_SCRIPT = """
import numpy as np, ctfio
src = ctfio.MinibatchSourceFromData(dict(x=np.arange(40, dtype=np.float32).reshape(40, 1)))
ctfio.training_session(src, lambda d, i: 1.5, mb_size=10, epoch_size=20, max_samples=40,
                       progress=%s).train()
"""


def _run_with_terminal(code):
    """Runs code in a new Python whose stdout and stderr are a pseudo-terminal; its output."""
    import pty
    import sys
    pid, fd = pty.fork()
    if pid == 0:
        import fcntl
        import struct
        import termios
        # A terminal of 24 x 100 (a new pseudo-terminal has no size, and tqdm would draw a bar
        # of width 0).
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        os.execv(sys.executable, [sys.executable, "-c", code])
    chunks = []
    while True:
        try:
            b = os.read(fd, 4096)
        except OSError:
            break
        if not b:
            break
        chunks.append(b)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, b"".join(chunks).decode()
    return b"".join(chunks).decode()


def test_real_tqdm_bar_on_a_terminal():
    pytest.importorskip("tqdm")
    out = _run_with_terminal(_TQDM_SCRIPT % "True")
    assert "0/40 [00:00<?, ?sample/s]" in out                         # tqdm's own bar
    assert "epoch 1: 20 samples, 2 minibatches, loss 1.5" in out
    assert "epoch 2: 20 samples" in out
    # progress=False: nothing at all, terminal or not.
    assert _run_with_terminal(_TQDM_SCRIPT % "False").strip() == ""


def test_real_tqdm_draws_no_bar_off_a_terminal(capsys):
    pytest.importorskip("tqdm")
    run(ShuffledSource(), lambda d, i: 1.5, mb_size=10, epoch_size=20, max_samples=20,
        progress=True)
    out = capsys.readouterr()
    assert out.err == ""                                # no bar: stderr is not a terminal
    assert out.out.startswith("epoch 1: 20 samples, 2 minibatches, loss 1.5")
    run(ShuffledSource(), lambda d, i: 1.5, mb_size=10, max_samples=20, progress=False)
    assert capsys.readouterr() == ("", "")


class LabelCountingTrainer:
    """A sequence classifier's trainer as CNTK reports it: total_number_of_samples_seen counts
    the loss's samples, one label per sequence, while the source counts tokens."""

    def __init__(self, report=True):
        self.batches = []
        self._seen = 0
        self.report = report

    @property
    def total_number_of_samples_seen(self):
        return self._seen if self.report else None

    def train_minibatch(self, arguments):
        d = arguments["in_y"]
        self.batches.append((d.num_sequences, arguments["in_x"].num_samples))
        self._seen += d.num_sequences


def test_trainer_total_number_of_samples_seen_drives_limits_and_frequencies(tmp_path):
    """mb_size counts tokens (x has 1-5 steps per sequence); max_samples, epochs and the
    progress frequency count the trainer's labels, as in CNTK."""
    lengths = [1 + i % 5 for i in range(N)]
    path = _write(tmp_path, lengths=lengths)
    t = LabelCountingTrainer()
    lines = []
    s = training_session(trainer=t, mb_source=ctf_source(path, randomize=False), mb_size=7,
                         max_samples=30, epoch_size=10, progress_frequency=10,
                         model_inputs_to_streams={"in_x": "x", "in_y": "y"},
                         progress=lines.append)
    s.train()
    labels = sum(n for n, _ in t.batches)
    tokens = sum(k for _, k in t.batches)
    assert labels == s.samples_seen and 30 <= labels < 30 + 7
    assert tokens > labels and all(k <= 7 for _, k in t.batches)
    assert s.epoch == labels // 10 and [r["samples"] for r in s.epoch_results][:1] >= [10]
    assert [line for line in lines if line.startswith("  ")]

    # A trainer that reports nothing keeps the source's count (tokens).
    t2 = LabelCountingTrainer(report=False)
    s2 = training_session(trainer=t2, mb_source=ctf_source(path, randomize=False), mb_size=7,
                          max_samples=30, model_inputs_to_streams={"in_x": "x", "in_y": "y"},
                          progress=False).train()
    assert s2.samples_seen == sum(k for _, k in t2.batches) == 30
    assert sum(n for n, _ in t2.batches) < 30

"""ctfio.torch across processes (rules 7, 8): ``torch.distributed.run`` starts 2 (then 3) ranks on
CPU with gloo, each running torchrun_worker.py with automatic rank detection; the results are
compared with a single-process run of the same data.

* ranks come from the environment and from the process group without being passed;
* per step the ranks' minibatches are disjoint and their union is the single-process minibatch;
* one epoch (a sweep) delivers every sequence exactly once across the ranks;
* a checkpoint taken with 2 ranks, restored with 3, continues the same global order (elastic);
* a rank with no data in a step gets empty tensors and the step's collective completes;
* examples/torchrun_ddp.py trains, checkpoints and resumes with another rank count.

Each torchrun invocation is small (a 40-sequence file, a few steps) and runs under a timeout;
``--standalone`` picks a free port, so parallel test runs do not collide.
"""

import json
import os
import random
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import ctfio  # noqa: E402
import ctfio.torch as ct  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import torchrun_worker as tw  # noqa: E402

NUM_SEQS = 40
TIMEOUT = 120


def write_data(path, n=NUM_SEQS, seed=5):
    """n sequences of 1-4 samples: dense x (dim 3), one sparse label y (dim 5) per sequence."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for s in range(n):
            for i in range(rng.randint(1, 4)):
                line = "%d |x %s" % (s, " ".join("%.2f" % rng.uniform(-1, 1) for _ in range(3)))
                if i == 0:
                    line += " |y %d:1" % rng.randrange(5)
                f.write(line + "\n")


def torchrun(nproc, args, cwd, timeout=TIMEOUT):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node=%d" % nproc] + args
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, "%s\nstdout:\n%s\nstderr:\n%s" % (cmd, p.stdout[-4000:],
                                                                 p.stderr[-4000:])
    return p


def load(out, mode, nproc):
    results = []
    for r in range(nproc):
        with open(os.path.join(out, "%s-rank%d.json" % (mode, r))) as f:
            results.append(json.load(f))
    return results


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("torchrun")
    write_data(str(d / "data.ctf"))
    return str(d)


@pytest.fixture(scope="module")
def two_ranks(data):
    torchrun(2, [os.path.join(HERE, "torchrun_worker.py"), "run", data, data], cwd=data)
    return load(data, "run", 2)


def reference(data, steps, state=None, **kw):
    """The single-process run: per step, {key: feature sum}."""
    ds = ct.CTFIterableDataset(lambda: tw.source(os.path.join(data, "data.ctf"), **kw), tw.K,
                               epoch_size=ctfio.INFINITELY_REPEAT, with_keys=True,
                               number_of_workers=1, worker_rank=0)
    if state is not None:
        ds.load_state_dict(state)
    out = []
    for i, batch in enumerate(ds):
        rec = tw.step_record(batch)
        out.append(dict(zip(rec["keys"], rec["sums"])))
        if i + 1 == steps:
            break
    return out, ds


def check_steps(ranks, ref):
    """Per step: disjoint shares whose union is the single-process minibatch."""
    for i, want in enumerate(ref):
        union = {}
        for res in ranks:
            got = res["steps"][i]
            assert not set(got["keys"]) & set(union), "step %d: shares overlap" % i
            union.update(zip(got["keys"], got["sums"]))
            assert got["global_samples"] == ranks[0]["steps"][i]["global_samples"]
        assert union.keys() == want.keys(), "step %d" % i
        for k in want:
            assert union[k] == pytest.approx(want[k], abs=1e-5)


def test_ranks_detected_without_arguments(two_ranks):
    for r, res in enumerate(two_ranks):
        assert res["world"] == [2, r]
        assert res["env_detected"] == [2, r]        # RANK / WORLD_SIZE
        assert res["dist_detected"] == [2, r]       # the gloo process group
        assert res["ds_workers"] == [2, r]


def test_steps_disjoint_and_union_is_single_process(two_ranks, data):
    ref, _ = reference(data, tw.STEPS)
    check_steps(two_ranks, ref)
    # Every step moved the same global amount of data on both ranks.
    for i, _want in enumerate(ref):
        assert two_ranks[0]["steps"][i]["global_samples"] == sum(
            two_ranks[r]["steps"][i]["samples"] for r in range(2))


def test_sweep_covers_every_sequence_once(two_ranks):
    a, b = two_ranks[0]["sweep"], two_ranks[1]["sweep"]
    assert len(a) == len(b) > 1                     # the epoch ends at the same step
    keys = [k for res in two_ranks for step in res["sweep"] for k in step]
    assert sorted(keys) == list(range(NUM_SEQS))


def test_empty_share_is_empty_tensors_not_a_hang(two_ranks):
    steps = [[res["empty"][i] for res in two_ranks] for i in range(4)]
    for _i, shares in enumerate(steps):
        assert sorted(len(s["keys"]) for s in shares) == [0, 1]
        assert all(s["global_samples"] >= 1 for s in shares)
        empty = [s for s in shares if not s["keys"]][0]
        assert empty["shapes"]["features"] == [0, 0, 3]
        assert empty["shapes"]["features_mask"] == [0, 0]
        assert empty["shapes"]["labels"] == [0, 5]
    # File order, sequence i to rank i mod 2.
    assert [k for i, shares in enumerate(steps) for s in shares for k in s["keys"]] == [0, 1, 2, 3]
    assert two_ranks[0]["empty"][0]["keys"] == [0] and two_ranks[1]["empty"][1]["keys"] == [1]


def test_checkpoint_same_on_every_rank_and_equal_to_single_process(two_ranks, data):
    s0, s1 = two_ranks[0]["state"], two_ranks[1]["state"]
    assert s0 == s1
    _, ds = reference(data, tw.STATE_AT)
    assert ds.state_dict() == s0


def test_elastic_restore_two_ranks_to_three(two_ranks, data):
    state = two_ranks[0]["state"]
    with open(os.path.join(data, "state.json"), "w") as f:
        json.dump(state, f)
    torchrun(3, [os.path.join(HERE, "torchrun_worker.py"), "resume", data, data], cwd=data)
    three = load(data, "resume", 3)
    for r, res in enumerate(three):
        assert res["dist_detected"] == [3, r]
    ref, _ = reference(data, tw.RESUME_STEPS, state=state)
    check_steps(three, ref)
    # ...which is the uninterrupted run's continuation.
    full, _ = reference(data, tw.STATE_AT + tw.RESUME_STEPS)
    assert ref == full[tw.STATE_AT:]
    # The first steps after the checkpoint hold the same sequences the 2 ranks saw then.
    for i in range(tw.STEPS - tw.STATE_AT):
        two = sorted(k for res in two_ranks for k in res["steps"][tw.STATE_AT + i]["keys"])
        assert two == sorted(k for res in three for k in res["steps"][i]["keys"])


def test_ddp_example_trains_checkpoints_and_resumes(tmp_path):
    ckpt = str(tmp_path / "ddp.pt")
    script = os.path.join(ROOT, "examples", "torchrun_ddp.py")
    common = ["--data", str(tmp_path), "--checkpoint", ckpt, "--sequences", "60"]
    p = torchrun(2, [script, "--epochs", "1"] + common, cwd=str(tmp_path))
    assert "world size 2" in p.stdout and os.path.exists(ckpt)
    # Resume with one rank (plain python: no torchrun, no process group).
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    q = subprocess.run([sys.executable, script, "--epochs", "2", "--resume"] + common,
                       cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert q.returncode == 0, q.stdout + q.stderr
    assert "world size 1" in q.stdout and "after epoch 0" in q.stdout
    assert "epoch 1:" in q.stdout and "epoch 0:" not in q.stdout

"""Crash and resume (rules 8.2): a training loop in a subprocess
(crash_worker.py: randomized source, two prefetch threads, small chunks, a checkpoint every
few minibatches) is killed with SIGKILL at random points, restarted from its last checkpoint,
again and again, until it finishes. Its output -- every minibatch's keys and values -- must equal
that of an uninterrupted run bit for bit, for one worker and for two workers (two processes,
ranks 0 and 1, killed independently)."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "crash_worker.py")
MINIBATCHES = 48
SLEEP = 0.01  # per minibatch: a run takes about half a second after start-up


def write_data(path, n=240):
    """n sequences of 1-4 lines: x dense dim 3, y sparse dim 10 on the first line."""
    rng = random.Random(5)
    lines = []
    for s in range(n):
        for j in range(1 + (s * 7) % 4):
            y = " |y %d:%d" % (rng.randrange(10), rng.randint(1, 9)) if j == 0 else ""
            lines.append("%d |x %d %d.5 %d%s\n" % (s, s, j, rng.randint(-99, 99), y))
    with open(path, "w") as f:
        f.write("".join(lines))


def command(data, out, state, workers, rank):
    return [sys.executable, WORKER, data, out, state, "--workers", str(workers), "--rank",
            str(rank), "--minibatches", str(MINIBATCHES), "--every", "3", "--sleep", str(SLEEP)]


def run_uninterrupted(tmp, data, workers):
    outs = []
    procs = []
    for r in range(workers):
        out, state = os.path.join(tmp, "ref%d.bin" % r), os.path.join(tmp, "ref%d.state" % r)
        procs.append(subprocess.Popen(command(data, out, state, workers, r),
                                      stderr=subprocess.PIPE))
        outs.append(out)
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()
    return [open(o, "rb").read() for o in outs]


def progress(state):
    """Minibatches done at the last checkpoint (0 before the first)."""
    try:
        with open(state) as f:
            return json.load(f)["minibatches"]
    except (OSError, ValueError):
        return 0


def run_with_kills(tmp, data, workers, seed):
    """Runs every rank to completion, killing its process with SIGKILL again and again: in a
    round, each running process is killed either early (start-up, indexing, first minibatches)
    or a random moment after its checkpoint has reached a random minibatch -- so that kills land
    between checkpoints, with output written after the last one, however fast the machine is.
    After four rounds the runs may finish.
    @return : the outputs, the number of kills and the number of resumes from a checkpoint."""
    rng = random.Random(seed)
    outs = [os.path.join(tmp, "crash%d_%d.bin" % (seed, r)) for r in range(workers)]
    states = [os.path.join(tmp, "crash%d_%d.state" % (seed, r)) for r in range(workers)]
    done = [False] * workers
    kills = resumes = rounds = 0
    while not all(done):
        rounds += 1
        assert rounds < 40, "no progress"
        procs = {}
        plan = {}  # rank -> (kill at this time) or (kill after this checkpoint, extra delay)
        for r in range(workers):
            if done[r]:
                continue
            resumes += os.path.exists(states[r])
            procs[r] = subprocess.Popen(command(data, outs[r], states[r], workers, r),
                                        stderr=subprocess.PIPE)
            start = time.monotonic()
            if rounds > 4 or progress(states[r]) >= MINIBATCHES - 1:
                plan[r] = ("never",)
            elif rng.random() < 0.3:
                plan[r] = ("at", start + rng.uniform(0.0, 0.4))
            else:
                target = rng.randint(progress(states[r]) + 1, MINIBATCHES - 1)
                plan[r] = ("after", target, rng.uniform(0.0, 6 * SLEEP))
        while procs:
            time.sleep(0.002)
            now = time.monotonic()
            for r in list(procs):
                p = procs[r]
                if p.poll() is None:
                    kind = plan[r][0]
                    if kind == "after" and progress(states[r]) >= plan[r][1]:
                        plan[r] = ("at", now + plan[r][2])
                    elif kind == "at" and now >= plan[r][1]:
                        p.send_signal(signal.SIGKILL)
                        p.wait()
                        kills += 1
                    else:
                        continue
                    if p.poll() is None:
                        continue
                err = p.stderr.read().decode()
                p.stderr.close()
                assert p.returncode in (0, -signal.SIGKILL), err
                done[r] = p.returncode == 0
                del procs[r]
    return [open(o, "rb").read() for o in outs], kills, resumes


@pytest.mark.parametrize("workers", [1, 2])
def test_killed_and_resumed_equals_uninterrupted(tmp_path, workers):
    tmp = str(tmp_path)
    data = os.path.join(tmp, "data.ctf")
    write_data(data)
    ref = run_uninterrupted(tmp, data, workers)
    for r in ref:
        assert r.count(b"END") == 0 and len(r) > 4000
    if workers == 2:
        assert ref[0] != ref[1]
    total_kills = total_resumes = 0
    for seed in (1, 2, 3):
        got, kills, resumes = run_with_kills(tmp, data, workers, seed)
        total_kills += kills
        total_resumes += resumes
        for r in range(workers):
            assert got[r] == ref[r], "seed %d, rank %d: output differs from the uninterrupted run" \
                % (seed, r)
    print("workers %d: %d kills, %d resumes" % (workers, total_kills, total_resumes))
    # The test tested something: runs were killed, and resumed from checkpoints.
    assert total_kills >= 3
    assert total_resumes >= 3

"""What a conversion may touch, from Python and the command: only the named output. The input
named again as the output is refused; files and links with temporary-looking names are left
alone; concurrent conversions to one output leave one whole result; Ctrl-C and SIGTERM cancel a
conversion (with or without a progress callback) and leave no temporary file behind."""
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ctfio

ROOT = pathlib.Path(__file__).resolve().parents[2]


def temporaries(directory, name):
    return sorted(p.name for p in pathlib.Path(directory).iterdir()
                  if p.name.startswith(name + ".") and p.name.endswith(".part"))


def big_svm(path, mib):
    block = "".join("%d 1:%d.25 7:3 %d:1.5\n" % (i % 2, i, i % 900 + 10) for i in range(20000))
    with open(path, "w") as f:
        for _ in range(mib * (1 << 20) // len(block) + 1):
            f.write(block)
    return path


def test_output_that_is_the_input_is_refused(tmp_path):
    csv = tmp_path / "d.csv"
    csv.write_text("1,2\n3,4\n")
    npy = tmp_path / "x.npy"
    np.save(npy, np.arange(6.0).reshape(3, 2))
    npy_bytes = npy.read_bytes()
    (tmp_path / "link.npy").symlink_to(npy)
    for src, dst, kw in [(csv, csv, dict(label=0)), (npy, npy, {}),
                         (npy, tmp_path / "link.npy", {}), (npy, tmp_path / "." / "x.npy", {}),
                         (csv, str(tmp_path / "sub" / ".." / "d.csv"), dict(label=0))]:
        (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(ValueError, match="is the input file"):
            ctfio.convert(src, dst, show_config=False, **kw)
    assert csv.read_text() == "1,2\n3,4\n"
    assert npy.read_bytes() == npy_bytes
    # The labels file of a .npy pair counts as an input too.
    y = tmp_path / "y.npy"
    np.save(y, np.arange(3.0))
    with pytest.raises(ValueError, match="is the input file"):
        ctfio.convert(npy, y, labels=y, show_config=False)
    assert temporaries(tmp_path, "x.npy") == [] and temporaries(tmp_path, "y.npy") == []


def test_array_conversion_never_touches_files_with_temporary_names(tmp_path):
    out = tmp_path / "o.ctf"
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (tmp_path / "o.ctf.part").symlink_to(victim)
    ctfio.convert(np.ones((2, 2)), out, show_config=False)
    assert victim.read_text() == "mine\n"
    assert (tmp_path / "o.ctf.part").is_symlink()
    assert out.read_text() == "|features 1 1\n|features 1 1\n"
    assert temporaries(tmp_path, "o.ctf") == ["o.ctf.part"]


def test_concurrent_array_conversions_to_one_output_never_mix(tmp_path):
    out = tmp_path / "cc.ctf"
    a, b = np.full((30000, 3), 1.0), np.full((20000, 2), 2.0)
    for X, name in ((a, "a.ctf"), (b, "b.ctf")):
        ctfio.convert(X, tmp_path / name, show_config=False)
    want = {(tmp_path / "a.ctf").read_text(), (tmp_path / "b.ctf").read_text()}
    errors = []

    def job(X):
        try:
            ctfio.convert(X, out, show_config=False)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    for _ in range(3):
        threads = [threading.Thread(target=job, args=(X,)) for X in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert out.read_text() in want
        assert temporaries(tmp_path, "cc.ctf") == []


CHILD = """
import sys, ctfio, numpy as np
src, dst, kind = sys.argv[1:4]
if kind == "array":
    src = np.ones((3000000, 4))
print("start", flush=True)
ctfio.convert(src, dst, progress=False, show_config=False)
print("finished", flush=True)
"""


def interrupt(tmp_path, argv, name, sig, timeout=120):
    """Starts argv, waits for its temporary file next to `name`, sends sig; returns the
    finished process and its stderr."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=tmp_path)
    deadline = time.monotonic() + timeout
    while not temporaries(tmp_path, name):
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.002)
    p.send_signal(sig)
    out, err = p.communicate(timeout=timeout)
    return p, out, err


@pytest.mark.parametrize("kind", ["text", "array"])
def test_ctrl_c_cancels_a_conversion_without_a_progress_callback(tmp_path, kind):
    src = big_svm(tmp_path / "big.svm", 40) if kind == "text" else "-"
    p, out, err = interrupt(tmp_path, [sys.executable, "-c", CHILD, str(src), "o.ctf", kind],
                            "o.ctf", signal.SIGINT)
    assert p.returncode != 0 and "KeyboardInterrupt" in err, err
    assert "finished" not in out
    assert not (tmp_path / "o.ctf").exists()
    assert temporaries(tmp_path, "o.ctf") == []


@pytest.mark.parametrize("kind", ["text", "array"])
def test_sigterm_cancels_a_python_conversion_and_ends_by_sigterm(tmp_path, kind):
    src = big_svm(tmp_path / "big.svm", 40) if kind == "text" else "-"
    (tmp_path / "o.ctf").write_text("the old output\n")
    p, out, err = interrupt(tmp_path, [sys.executable, "-c", CHILD, str(src), "o.ctf", kind],
                            "o.ctf", signal.SIGTERM)
    assert p.returncode == -signal.SIGTERM, err
    assert (tmp_path / "o.ctf").read_text() == "the old output\n"
    assert temporaries(tmp_path, "o.ctf") == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_command_interrupted_removes_its_temporary_file(tmp_path, sig):
    big_svm(tmp_path / "big.svm", 40)
    p, out, err = interrupt(tmp_path, [sys.executable, "-m", "ctfio", "convert", "libsvm",
                                       "big.svm", "o.ctf", "--quiet"], "o.ctf", sig)
    assert p.returncode == -sig, err
    assert not (tmp_path / "o.ctf").exists()
    assert temporaries(tmp_path, "o.ctf") == []


def test_write_ctf_into_a_device_writes_in_place(tmp_path):
    # A device named as the output is written, never replaced by a renamed file.
    assert ctfio.write_ctf("/dev/null", {"x": np.ones((2, 2))}) == 2
    assert pathlib.Path("/dev/null").is_char_device()
    assert not any(n.startswith("null.") for n in os.listdir("/dev"))

"""The command comes with the package: an sdist is built, a wheel from it, the wheel installed into
a fresh virtualenv (no network: the build uses this environment's setuptools), and there
`ctfio --help` and `python -m ctfio --help` run, and real commands (convert, stats, dump, an error,
a usage error) print the same bytes and exit with the same status as build/ctfio. Also the
`stats` histogram."""
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILT_CLI = ROOT / "build" / "ctfio"


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv holding only the wheel built from the sdist; returns its bin folder."""
    tmp = tmp_path_factory.mktemp("pkg")
    src = tmp / "src"
    # The sdist from a copy of the tree, so that the build leaves nothing in the checkout.
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".venv", "build", ".git", "*.so", "*.egg-info", "__pycache__", "bench"))
    r = run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
             "print(b.build_sdist(sys.argv[1]))", tmp / "dist"], cwd=src)
    assert r.returncode == 0, r.stderr
    sdist = tmp / "dist" / r.stdout.split()[-1]
    with tarfile.open(sdist) as t:
        names = t.getnames()
    for need in ("tools/ctfio.c", "tools/ctfio_convert.c", "tools/cli.h", "lib/convert/convert.c",
                 "include/ctfio.h", "python/ctfio/_tools.c", "python/ctfio/__main__.py"):
        assert any(n.endswith(need) for n in names), need
    env = dict(os.environ, CTFIO_DEBUG="1")   # -O0: a quicker compile, the same program
    r = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
             "--no-index", "-w", tmp / "wheels", sdist], env=env)
    assert r.returncode == 0, r.stderr
    wheel = next((tmp / "wheels").glob("ctfio-*.whl"))
    v = tmp / "venv"
    r = run([sys.executable, "-m", "venv", "--without-pip", v])
    assert r.returncode == 0, r.stderr
    r = run([sys.executable, "-m", "pip", "--python", v / "bin" / "python", "install", "-q",
             "--no-deps", "--no-index", wheel])
    assert r.returncode == 0, r.stderr
    return v / "bin"


def test_installed_command_and_module(venv):
    assert (venv / "ctfio").exists()
    a = run([venv / "ctfio", "--help"])
    b = run([venv / "python", "-m", "ctfio", "--help"])
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout and a.stdout.startswith("usage: ctfio COMMAND")
    assert "convert" in a.stdout
    if BUILT_CLI.exists():
        assert a.stdout == run([BUILT_CLI, "--help"]).stdout


@pytest.mark.skipif(not BUILT_CLI.exists(), reason="needs build/ctfio (make)")
def test_same_program_as_build_ctfio(venv, tmp_path):
    svm = tmp_path / "d.svm"
    svm.write_text("1 qid:1 1:0.5 3:2\n0 qid:1 2:1e-3\n2 qid:4 4:7\n")
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:0.5\n1 2:zz\n")
    ctf = tmp_path / "d.ctf"
    cases = [
        ["convert", "libsvm", svm, ctf, "--classes", "3"],
        ["stats", "--file", ctf, "--input", "features:4:sparse", "--input", "labels:3:sparse"],
        ["dump", "--file", ctf, "--input", "features:4:sparse", "--input", "labels:3:sparse",
         "--mb", "2", "--count", "3", "--state"],
        ["convert", "libsvm", bad, tmp_path / "bad.ctf"],
        ["check", "--file", tmp_path / "nothing.ctf", "--input", "x:1:dense"],
        ["dump", "--bogus"],
        ["convert", "csv", svm, ctf],
    ]
    codes = set()
    for args in cases:
        built = run([BUILT_CLI] + args)
        for exe in ([venv / "ctfio"], [venv / "python", "-m", "ctfio"]):
            got = run(exe + args)
            assert (got.returncode, got.stdout, got.stderr) == \
                (built.returncode, built.stdout, built.stderr), args
        codes.add(built.returncode)
    assert codes == {0, 1, 2}


@pytest.mark.skipif(not BUILT_CLI.exists(), reason="needs build/ctfio (make)")
def test_stats_histogram(tmp_path):
    lengths = [1] * 6 + [2, 3] * 3 + [5] * 2 + [12]
    lines = []
    for i, n in enumerate(lengths):
        lines += ["%d |x %d" % (i, t) for t in range(n)]
    p = tmp_path / "s.ctf"
    p.write_text("\n".join(lines) + "\n")
    out = run([BUILT_CLI, "stats", "--file", p, "--input", "x:1:dense"]).stdout
    assert "sequence lengths (index samples): min 1, mean 2.87, max 12" in out
    rows = [l.split() for l in out.splitlines() if l.startswith("   ") and "%" in l]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("1", "6", "40.0%"), ("2-3", "6", "40.0%"), ("4-7", "2", "13.3%"), ("8-15", "1", "6.7%")]
    assert [len(r[3]) for r in rows] == [40, 40, 14, 7]     # bars scaled to the largest bucket


@pytest.mark.skipif(not BUILT_CLI.exists(), reason="needs build/ctfio (make)")
def test_broken_pipe_and_interrupt_as_the_binary(venv, tmp_path):
    """`ctfio dump | head` ends by SIGPIPE and Ctrl-C by SIGINT, as for the compiled binary
    (Python would otherwise ignore SIGPIPE and hold SIGINT for Python code)."""
    import signal
    data = tmp_path / "big.ctf"
    data.write_text("".join("%d |x %d\n" % (i, i) for i in range(300000)))
    args = ["dump", "--file", str(data), "--input", "x:1:dense"]
    for exe in ([str(BUILT_CLI)], [str(venv / "ctfio")]):
        p = subprocess.Popen(exe + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdout.readline()
        p.stdout.close()
        assert p.wait() == -signal.SIGPIPE and p.stderr.read() == b""
        p.stderr.close()
        p = subprocess.Popen(exe + args + ["--mb", "7"], stdout=subprocess.PIPE)
        p.stdout.readline()      # the C tool runs: dumping minibatches, endless with --mb
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == -signal.SIGINT
        p.stdout.close()

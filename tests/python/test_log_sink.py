"""The library logs nothing without a sink; the extension installs one: with log=None the
warnings still reach stderr (the package's documented default), with a callable they go only to
it. Each case runs in a child process so that the file descriptor itself is checked."""

import subprocess
import sys

import pytest

pytest.importorskip("ctfio._ctfio")

CHILD = r"""
import sys
from ctfio import _ctfio
seen = []
log = None if sys.argv[2] == "none" else (lambda *a: seen.append(a))
r = _ctfio.Reader(sys.argv[1], [("x", None, 3, False, False)], randomize=False, max_sweeps=1,
                  num_threads=0, log=log)
while r.next(4) is not None:
    pass
print(len(seen))
"""


@pytest.mark.parametrize("mode", ["none", "callable"])
def test_log_none_writes_warnings_to_stderr(tmp_path, mode):
    path = tmp_path / "short.ctf"
    path.write_text("0 |x 1 2\n1 |x 1 2 3\n")  # a short dense sample: one warning
    p = subprocess.run([sys.executable, "-c", CHILD, str(path), mode], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    if mode == "none":
        assert "warning: stream 'x': dense sample has 2 of dim=3 values" in p.stderr
        assert p.stdout.strip() == "0"
    else:
        assert "warning" not in p.stderr
        assert p.stdout.strip() == "1"


def test_extension_has_no_test_hooks():
    """The extension compiles lib/ as the release library: no allocation or I/O counters."""
    import shutil

    from ctfio import _ctfio
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm is not installed")
    out = subprocess.run([nm, _ctfio.__file__], capture_output=True, text=True).stdout
    assert "ctf_reader_open" in out  # the symbols are there to be checked
    for hook in ("ctf__alloc\n", "ctf__io_fail_at", "ctf__io_count", "ctf__parse_set_variant"):
        assert hook not in out + "\n", hook

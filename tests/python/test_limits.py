"""Configuration limits reach Python as clear errors before any work starts: a thread count
above 1024 and a dimension near 2^64 (which once crashed the parser) are ValueErrors naming the
parameter."""


import pytest

_ctfio = pytest.importorskip("ctfio._ctfio")


def test_num_threads_is_bounded(tmp_path):
    path = tmp_path / "d.ctf"
    path.write_text("|x 1 2 3\n")
    with pytest.raises(ValueError, match="num_threads"):
        _ctfio.Reader(str(path), [("x", None, 3, False, False)], num_threads=100000)


@pytest.mark.parametrize("sparse", [False, True])
def test_huge_dim_is_refused(tmp_path, sparse):
    path = tmp_path / "d.ctf"
    path.write_text("|x 1 2 3\n" if not sparse else "|x 0:1\n")
    with pytest.raises(ValueError, match="dim"):
        _ctfio.Reader(str(path), [("x", None, 2**64 - 1, sparse, False)])

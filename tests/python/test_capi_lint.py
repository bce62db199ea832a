"""A text lint of python/ctfio/_ctfio.c for C-API pitfalls (msgspec's cpylint idea).

Between Py_BEGIN_ALLOW_THREADS and its Py_END_ALLOW_THREADS the GIL is not held, so:
  * the END must come before any `return` or `goto` (leaving the block skips re-acquiring it),
  * blocks do not nest, and every BEGIN has an END,
  * no Python C-API call (Py*/_Py* identifiers called as functions, or Py_INCREF-style macros)
    appears in between.
No compiler, no extension build needed: this runs everywhere.
"""

import pathlib
import re

import pytest

PKG = pathlib.Path(__file__).resolve().parents[2] / "python" / "ctfio"
SRC = PKG / "_ctfio.c"
# Every C file of the extension is linted (all of python/ctfio/*.c; a test below holds the list
# to the directory): _buffer.c holds the Buffer type, _stats.c the stats dicts, _provider.c the
# provider's batch assembly, _tools.c the CLI and converters, _timeline.c the timeline views,
# _minibatch.c the Minibatch type.
SOURCES = [SRC, PKG / "_buffer.c", PKG / "_config.c", PKG / "_stats.c", PKG / "_provider.c",
           PKG / "_tools.c", PKG / "_timeline.c", PKG / "_minibatch.c"]


def test_every_extension_source_is_linted():
    assert sorted(map(str, SOURCES)) == sorted(map(str, PKG.glob("*.c")))
BEGIN, END = "Py_BEGIN_ALLOW_THREADS", "Py_END_ALLOW_THREADS"


def _strip_comments_and_strings(text):
    """Blanks comments and string/char literals, keeping newlines so line numbers stay right."""
    out = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q:
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            out.append(text[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)


def _blocks(code):
    """(begin_line, end_line, body) of each GIL-released block; fails on unmatched markers."""
    tokens = [(m.start(), m.group()) for m in re.finditer(r"\bPy_(BEGIN|END)_ALLOW_THREADS\b",
                                                          code)]
    blocks, open_at = [], None
    for pos, tok in tokens:
        line = code.count("\n", 0, pos) + 1
        if tok == BEGIN:
            assert open_at is None, "line %d: %s nested inside another block" % (line, BEGIN)
            open_at = pos
        else:
            assert open_at is not None, "line %d: %s without %s" % (line, END, BEGIN)
            body = code[open_at + len(BEGIN):pos]
            blocks.append((code.count("\n", 0, open_at) + 1, line, body))
            open_at = None
    assert open_at is None, "line %d: %s without %s" % (
        code.count("\n", 0, open_at) + 1, BEGIN, END)
    return blocks


@pytest.fixture(scope="module")
def code():
    if not SRC.exists():
        pytest.skip("python/ctfio/_ctfio.c not found")
    # Joined with a separator that no block can span (each file must balance on its own).
    texts = [_strip_comments_and_strings(p.read_text()) for p in SOURCES if p.exists()]
    for t in texts:
        _blocks(t)
    return "\n;\n".join(texts)


def test_there_are_gil_released_blocks(code):
    # The reader must release the GIL at least around open and next.
    bodies = [b for _, _, b in _blocks(code)]
    assert any("ctf_reader_next" in b for b in bodies)
    assert any("ctf_reader_open" in b for b in bodies)


def test_no_return_or_goto_inside_gil_released_blocks(code):
    for begin, end, body in _blocks(code):
        m = re.search(r"\b(return|goto|break|continue|longjmp)\b", body)
        assert not m, "lines %d-%d: '%s' inside a GIL-released block" % (begin, end, m.group(1))


def test_no_python_api_inside_gil_released_blocks(code):
    for begin, end, body in _blocks(code):
        m = re.search(r"\b_?Py[A-Za-z0-9_]*\s*\(", body)
        assert not m, "lines %d-%d: Python C-API call '%s' without the GIL" % (
            begin, end, m.group().rstrip("( "))


def test_lint_catches_mistakes():
    bad_return = "void f(void) { Py_BEGIN_ALLOW_THREADS if (x) return; Py_END_ALLOW_THREADS }"
    blocks = _blocks(_strip_comments_and_strings(bad_return))
    assert re.search(r"\breturn\b", blocks[0][2])
    bad_call = "Py_BEGIN_ALLOW_THREADS x = PyLong_FromLong(1); Py_END_ALLOW_THREADS"
    assert re.search(r"\b_?Py[A-Za-z0-9_]*\s*\(", _blocks(bad_call)[0][2])
    commented = "Py_BEGIN_ALLOW_THREADS /* return PyFoo() */ f(\"goto\"); Py_END_ALLOW_THREADS"
    body = _blocks(_strip_comments_and_strings(commented))[0][2]
    assert not re.search(r"\b(return|goto)\b|\bPy\w*\s*\(", body)
    with pytest.raises(AssertionError):
        _blocks("Py_BEGIN_ALLOW_THREADS f(); return;")
    with pytest.raises(AssertionError):
        _blocks("Py_BEGIN_ALLOW_THREADS Py_BEGIN_ALLOW_THREADS Py_END_ALLOW_THREADS")

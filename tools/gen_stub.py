#!/usr/bin/env python3
"""Writes the reader parameters of python/ctfio/_ctfio.pyi (Reader's keywords and the
ReaderArgs dict) from the parameter table (lib/config/params.def), as the built extension
reports it (_ctfio.reader_params()). The stub's other lines are written by hand.

Usage: gen_stub.py [--check]     --check: exit 1, changing nothing, when the stub is stale.
Run it with the package installed (make py), e.g. .venv/bin/python tools/gen_stub.py."""

import os
import sys

STUB = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "python", "ctfio", "_ctfio.pyi"
)
BEGIN = "# BEGIN reader %s (tools/gen_stub.py; edit lib/config/params.def)"
END = "# END reader %s"
TYPES = {
    "bool": "bool",
    "uint": "int",
    "limit": "int",
    "precision": 'Literal["float", "float32", "double", "float64"]',
}


def default_text(p):
    """The default as a reader of the stub wants it."""
    if p["default_text"]:
        return p["default_text"]
    if p["kind"] == "bool":
        return "True" if p["default"] else "False"
    if p["kind"] == "precision":
        return '"double"' if p["default"] == 8 else '"float"'
    if p["kind"] == "limit" and p["default"] == 2**64 - 1:
        return "INFINITELY_REPEAT"
    return str(p["default"])


def keyword_lines(params, indent):
    out = []
    for p in params:
        out.append("%s# %s; default %s" % (indent, p["help"], default_text(p)))
        out.append("%s%s: %s | None = None," % (indent, p["field"], TYPES[p["kind"]]))
    return out


def dict_lines(params, indent):
    out = []
    for p in params:
        t = 'Literal["float", "double"]' if p["kind"] == "precision" else TYPES[p["kind"]]
        if p["default_text"] and p["default"] == p["max"]:
            t = "%s | None  # None: %s" % (t, p["default_text"])
        out.append("%s%s: %s" % (indent, p["field"], t))
    return out


def render(text, params):
    """text with its two generated blocks rewritten: Reader's keywords and ReaderArgs' keys."""
    for what, make in (("keywords", keyword_lines), ("arguments", dict_lines)):
        lines = text.split("\n")
        starts = [i for i, x in enumerate(lines) if x.strip() == BEGIN % what]
        ends = [i for i, x in enumerate(lines) if x.strip() == END % what]
        if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
            raise SystemExit(
                "gen_stub: the stub needs one '%s' ... '%s' block" % (BEGIN % what, END % what)
            )
        first = lines[starts[0]]
        indent = first[: len(first) - len(first.lstrip())]
        lines[starts[0] + 1 : ends[0]] = make(params, indent)
        text = "\n".join(lines)
    return text


def main(argv):
    from ctfio import _ctfio

    with open(STUB) as f:
        old = f.read()
    new = render(old, _ctfio.reader_params())
    if "--check" in argv:
        if new != old:
            print("gen_stub: python/ctfio/_ctfio.pyi is stale; run tools/gen_stub.py")
            return 1
        return 0
    if new != old:
        with open(STUB, "w") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

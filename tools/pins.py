"""tools/pins.py EXTRA... -- prints the package's own dependencies and those of the given
optional-dependency extras of pyproject.toml, one per line: the one place the test dependencies
are pinned (the Makefile installs them into .venv from here). It runs on the interpreter that
makes the venv, so it reads the file without tomllib (3.11+) where that is missing: the lists
are one line each."""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tables(text):
    """(dependencies, {extra: requirements})."""
    try:
        import tomllib
    except ImportError:
        tomllib = None
    if tomllib is not None:
        project = tomllib.loads(text)["project"]
        return project["dependencies"], project["optional-dependencies"]
    deps = re.search(r"^dependencies\s*=\s*\[(.*)\]\s*$", text, re.M)
    body = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    out = {}
    for line in body.splitlines():
        m = re.match(r"\s*([A-Za-z0-9_-]+)\s*=\s*\[(.*)\]\s*$", line)
        if m:
            out[m.group(1)] = re.findall(r'"([^"]+)"', m.group(2))
    return re.findall(r'"([^"]+)"', deps.group(1)) if deps else [], out


def main():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        deps, table = tables(f.read())
    seen = list(deps)
    for name in sys.argv[1:]:
        if name not in table:
            raise SystemExit("tools/pins.py: pyproject.toml has no extra %r" % name)
        seen += [r for r in table[name] if r not in seen]
    print("\n".join(seen))


if __name__ == "__main__":
    main()

"""The ``ctfio`` command (console script) and ``python -m ctfio``: the same program as the
compiled ``build/ctfio``, whose C code is part of the extension (see docs/convert.md)."""

import sys


def main(argv=None):
    """Runs the command-line tool with ``argv`` (default ``sys.argv[1:]``); returns its exit
    status (the console script passes it to ``sys.exit``)."""
    from ._ctfio import cli_main

    args = list(sys.argv[1:] if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    return cli_main(["ctfio"] + [str(a) for a in args])


if __name__ == "__main__":
    sys.exit(main())

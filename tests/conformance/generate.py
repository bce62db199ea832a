#!/usr/bin/env python3
"""Writes the conformance corpus's expected minibatches from the CLI's `dump --mb` output, and
checks that the committed expectations are what it writes.

The committed expectations were first computed by a model of CNTK's randomizer and minibatch
rules written apart from the library, which converted the numbers its own way (a few values
differ from the correctly rounded ones in the last digit). So a case counts as unchanged when
the CLI's minibatches equal the committed ones under check.py's comparison, and --update
rewrites only the files that differ: a new case, or a rule change meant to move the output.

Usage:
  generate.py PATH_TO_CTFIO --check [CASE_GLOB]     regenerate every case in a temporary folder
                                                    and compare file by file (make conformance)
  generate.py PATH_TO_CTFIO --out DIR [CASE_GLOB]   write every case's expectation into DIR
  generate.py PATH_TO_CTFIO --update [CASE_GLOB]    rewrite the cases/ files that differ
A run needs the case's .ctf, .cntk and .args; its last line is 'N passed, N failed'."""
import argparse
import json
import os
import sys
import tempfile

import check


def normal(mb):
    """One minibatch in the expectation's layout: the fields check.py compares, numbers as
    JSON numbers (float values, int sparse indices and keys)."""
    def sample(s):
        return [[int(v[0]), float(v[1])] if isinstance(v, list) else float(v) for v in s]
    return {'index': mb['index'], 'position': mb['position'],
            'end_of_sweep': bool(mb.get('end_of_sweep')),
            'sequences': [{'key': q['key'],
                           'streams': {name: [sample(s) for s in samples]
                                       for name, samples in q.get('streams', {}).items()}}
                          for q in mb.get('sequences', [])]}


def write(path, mbs):
    with open(path, 'w') as f:
        for mb in mbs:
            f.write(json.dumps(normal(mb)) + '\n')


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('cli')
    ap.add_argument('glob', nargs='?', default='*')
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument('--check', action='store_true')
    mode.add_argument('--update', action='store_true')
    mode.add_argument('--out')
    a = ap.parse_intermixed_args(argv[1:])
    cli = os.path.abspath(a.cli)
    with tempfile.TemporaryDirectory() as tmp:
        out = a.out or tmp
        os.makedirs(out, exist_ok=True)
        passed = failed = 0
        for tag in check.tags(a.glob):
            got, why = check.run(cli, tag)
            if why is None:
                made = os.path.join(out, tag + check.SUFFIX)
                write(made, got)
                committed = os.path.join(check.CASES, tag + check.SUFFIX)
                # Compare the written file, not the CLI's output: this also checks the layout.
                why = check.compare(check.load(made), check.load(committed), check.tolerance(tag))
                if why and a.update:
                    write(committed, got)
                    print('%s: rewritten (%s)' % (tag, why))
                    why = None
            if why:
                failed += 1
                print('%s: %s' % (tag, why))
            else:
                passed += 1
    print('%d passed, %d failed' % (passed, failed))
    if passed + failed == 0:
        print('no conformance case matched %r' % a.glob)
        return 1
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))

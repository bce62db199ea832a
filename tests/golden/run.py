#!/usr/bin/env python3
"""Golden-file tests for the CLI: tests/golden/{ok,err}/NAME.args holds a ctfio command line
(run from that folder, so paths in messages are just NAME.ctf); NAME.out and NAME.err hold the
exact expected stdout and stderr. ok/ cases must exit 0, err/ cases 1.

Usage: run.py PATH_TO_CTFIO [NAME_FILTER]     CTFIO_UPDATE_GOLDEN=1 rewrites the expectations.
Last line: 'N passed, N failed'; no case at all is a failure."""
import os
import pathlib
import shlex
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
cli = os.path.abspath(sys.argv[1])
filt = sys.argv[2] if len(sys.argv) > 2 else ''
update = os.environ.get('CTFIO_UPDATE_GOLDEN') == '1'
passed = failed = 0
for kind, want_rc in (('ok', 0), ('err', 1)):
    d = os.path.join(here, kind)
    for name in sorted(f[:-5] for f in os.listdir(d) if f.endswith('.args')):
        if filt not in name:
            continue
        args = shlex.split(pathlib.Path(d, name + '.args').read_text())
        r = subprocess.run([cli] + args, cwd=d, capture_output=True)
        why = None
        if r.returncode != want_rc:
            why = 'exit %d, expected %d: %s' % (r.returncode, want_rc, r.stderr.decode()[-300:])
        for ext, got in (('.out', r.stdout), ('.err', r.stderr)):
            path = os.path.join(d, name + ext)
            if update:
                if got or os.path.exists(path):
                    pathlib.Path(path).write_bytes(got)
                continue
            exp = pathlib.Path(path).read_bytes() if os.path.exists(path) else b''
            if got != exp and not why:
                gl = got.decode(errors='replace').splitlines()
                el = exp.decode(errors='replace').splitlines()
                for i in range(max(len(gl), len(el))):
                    a = gl[i] if i < len(gl) else '<missing>'
                    b = el[i] if i < len(el) else '<missing>'
                    if a != b:
                        why = '%s line %d:\n    got:      %s\n    expected: %s' % (ext, i + 1,
                                                                                   a[:300], b[:300])
                        break
        if why and not update:
            failed += 1
            print('FAIL %s/%s: %s' % (kind, name, why))
        else:
            passed += 1
print('%d passed, %d failed' % (passed, failed))
if passed + failed == 0:
    # A filter that matches nothing, or a checkout without the case files, must not pass.
    print('no golden case ran (filter %r)' % filt)
    sys.exit(1)
sys.exit(1 if failed else 0)

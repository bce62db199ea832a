"""Builds the one extension, ctfio._ctfio: python/ctfio/_ctfio.c (and its provider part,
_provider.c) compiled together with every lib/*/*.c (msgspec's single-Extension approach: no
shared library to ship or locate).
The command-line tool (tools/*.c) is compiled in too, its main() renamed ctfio_cli_main: the
`ctfio` console script and `python -m ctfio` call it through _tools.c (docs/convert.md).
Environment switches: CTFIO_DEBUG=1 (-O0, asserts), CTFIO_SANITIZE=1 (ASan + UBSan)."""
import glob
import os
import re
import shutil
import subprocess

from setuptools import Extension, setup

args = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Wno-missing-field-initializers"]
link = ["-pthread"]
if os.environ.get("CTFIO_DEBUG"):
    args += ["-O0", "-g", "-DCTF_DEBUG"]
else:
    args += ["-O2"]
if os.environ.get("CTFIO_SANITIZE"):
    args += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    link += ["-fsanitize=address,undefined"]



def _curl():
    """libcurl's flags (remote paths, docs/remote.md) from curl-config or pkg-config, as the
    Makefile finds them; without libcurl the extension still reads local files."""
    for cmd in (["curl-config"], ["pkg-config", "libcurl"]):
        if not shutil.which(cmd[0]):
            continue
        try:
            libs = subprocess.run(cmd + ["--libs"], capture_output=True, text=True, check=True)
            cflags = subprocess.run(cmd + ["--cflags"], capture_output=True, text=True, check=True)
        except (OSError, subprocess.CalledProcessError):
            continue
        if libs.stdout.strip():
            return ["-DCTF_HAVE_CURL"] + cflags.stdout.split(), libs.stdout.split()
    return [], []


def _version():
    """The version, written once: CTF_VERSION_STRING in include/ctfio.h."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "include", "ctfio.h")) as f:
        m = re.search(r'^#define CTF_VERSION_STRING "([^"]+)"', f.read(), re.M)
    if not m:
        raise SystemExit("setup.py: include/ctfio.h has no CTF_VERSION_STRING")
    return m.group(1)


curl_cflags, curl_libs = _curl()
args += curl_cflags
link += curl_libs

setup(
    version=_version(),
    ext_modules=[
        Extension(
            "ctfio._ctfio",
            sources=["python/ctfio/_ctfio.c", "python/ctfio/_buffer.c", "python/ctfio/_config.c",
                     "python/ctfio/_stats.c",
                     "python/ctfio/_provider.c", "python/ctfio/_tools.c",
                     "python/ctfio/_timeline.c", "python/ctfio/_minibatch.c"]
            + sorted(glob.glob("lib/*/*.c")) + sorted(glob.glob("tools/*.c")),
            depends=["include/ctfio.h", "python/ctfio/_buffer.h", "python/ctfio/_module.h",
                     "python/ctfio/_config.h",
                     "python/ctfio/_pyutil.h", "python/ctfio/_stats.h",
                     "python/ctfio/_provider.h", "python/ctfio/_tools.h", "tools/cli.h",
                     "tools/dump_json.h"]
            + sorted(glob.glob("lib/*/*.h")) + sorted(glob.glob("lib/*/*.def")),
            include_dirs=["include", "lib", "tools"],
            extra_compile_args=args + ["-pthread", "-Dmain=ctfio_cli_main"],
            extra_link_args=link,
            libraries=["m"],
        )
    ]
)

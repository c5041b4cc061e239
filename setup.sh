#!/usr/bin/env bash
# Creates (or reuses) the project virtualenv at .venv and the system packages the sandbox needs.
# Idempotent: re-running after the environment exists costs about a second.
#
# Python: $PYTHON if set (3.11, 3.12 or 3.13), else an existing .venv's, else the first of python3.11,
# python3.12, python3.13 that runs. On 3.11 it installs the exact lock requirements.txt (what CI runs); on
# 3.12 / 3.13 the lock is not guaranteed to resolve, so it installs -e ".[test,notebooks]" within setup.cfg's
# tested ranges. torch (test-only) comes from $TORCH_INDEX (default: PyTorch's CPU index) on machines without an
# NVIDIA GPU, when that index is reachable; TORCH_INDEX= (empty) leaves torch to pip's configured indexes.
set -euo pipefail
cd "$(dirname "$0")"
say() { echo "setup.sh: $*" >&2; }
fail() { say "$*"; exit 2; }

# bubblewrap: the sandbox; libseccomp2: the system-call filter of judged programs (through the
# pyseccomp ctypes bindings); openssl: the tests' self-signed certificate for the judge's TLS.
if [ "$(uname -s)" = Linux ]; then
  if ! command -v bwrap >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1 \
      || ! ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2'; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2 openssl >/dev/null
    else
      say "install the sandbox's system packages with: sudo apt-get install -y bubblewrap libseccomp2 openssl"
    fi
  fi
else
  say "$(uname -s): the judge's sandbox needs Linux (bubblewrap); the rest installs. Judge on a Linux host:" \
      "python -m maxk_jax.execution.serve there, --config.executor=http://HOST:PORT here."
fi

version_of() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
  ver=$(version_of "$PY") || fail "PYTHON=$PY does not run"
elif [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
  ver=$(version_of "$PY") || fail ".venv/bin/python does not run: remove .venv and run ./setup.sh again"
else
  PY="" ver=""
  for candidate in python3.11 python3.12 python3.13; do
    if command -v "$candidate" >/dev/null 2>&1 && ver=$(version_of "$candidate"); then PY=$candidate; break; fi
  done
  [ -n "$PY" ] || fail "no python3.11, python3.12 or python3.13 runs here: install one, or PYTHON=/path/to/python ./setup.sh"
fi
case "$ver" in
  3.11|3.12|3.13) ;;
  *) fail "Python $ver ($PY): 3.11, 3.12 or 3.13 required (e.g. PYTHON=python3.12 ./setup.sh)" ;;
esac
if [ -x .venv/bin/python ]; then
  venv_ver=$(version_of .venv/bin/python) || fail ".venv/bin/python does not run: remove .venv and run ./setup.sh again"
  [ "$venv_ver" = "$ver" ] || fail ".venv has Python $venv_ver, not $ver ($PY): remove .venv to rebuild it"
else
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
if [ "$ver" = 3.11 ]; then mode=lock; else mode=ranges; fi

stamp=".venv/.installed-$("$VPY" -c 'import hashlib, sys
h = hashlib.sha1(sys.argv[1].encode())
for f in ("setup.cfg", "requirements.txt"):
    h.update(open(f, "rb").read())
print(h.hexdigest()[:12])' "$ver $mode")"
[ -f "$stamp" ] && exit 0

"$VPY" -m pip install -q --upgrade pip
# torch without CUDA where there is no NVIDIA GPU (Linux's default torch wheel pulls the CUDA libraries)
index=${TORCH_INDEX-https://download.pytorch.org/whl/cpu}
if [ -n "$index" ] && [ "$(uname -s)" = Linux ] && ! command -v nvidia-smi >/dev/null 2>&1 \
    && [ ! -e /proc/driver/nvidia/version ]; then
  torch=$("$VPY" -c 'import configparser, sys
if sys.argv[1] == "lock":
    print(next(l.strip() for l in open("requirements.txt") if l.lower().startswith("torch==")))
else:
    cfg = configparser.ConfigParser(); cfg.read("setup.cfg")
    print(next(l.strip() for l in cfg["options.extras_require"]["test"].splitlines() if l.strip().startswith("torch")))' "$mode")
  if "$VPY" -c 'import os, signal, socket, sys, urllib.parse, urllib.request
url = sys.argv[1].rstrip("/") + "/torch/"
if url.startswith("file:"):   # a local mirror
    sys.exit(not os.path.isdir(urllib.request.url2pathname(urllib.parse.urlparse(url).path)))
signal.alarm(10); socket.setdefaulttimeout(5)
urllib.request.urlopen(url)' "$index" >/dev/null 2>&1; then
    say "CPU torch ($torch) from $index"
    "$VPY" -m pip install -q --index-url "$index" "$torch"
  else
    say "$index is unreachable: torch comes from pip's configured indexes (on Linux from PyPI: the CUDA build," \
        "~3 GB more, runs on CPU too)"
  fi
fi
if [ "$mode" = lock ]; then
  "$VPY" -m pip install -q -r requirements.txt -e ".[test,notebooks]"
else
  say "Python $ver: installing setup.cfg's ranges (the exact lock requirements.txt is for Python 3.11)"
  "$VPY" -m pip install -q -e ".[test,notebooks]"
fi
rm -f .venv/.installed-* && touch "$stamp"

#!/usr/bin/env bash
# Creates (or reuses) the project virtualenv at .venv and the system packages the sandbox needs.
# Idempotent: re-running after the environment exists costs about a second.
set -euo pipefail
cd "$(dirname "$0")"
# bubblewrap: the sandbox; libseccomp2: the system-call filter of judged programs (through the
# pyseccomp ctypes bindings); openssl: the tests' self-signed certificate for the judge's TLS.
if ! command -v bwrap >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1 \
    || ! ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2'; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2 openssl >/dev/null
  else
    echo "setup.sh: install the sandbox's system packages with: sudo apt-get install -y bubblewrap libseccomp2 openssl" >&2
  fi
fi
PY=${PYTHON:-python3}
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"Python 3.11 required, found {sys.version}"'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=".venv/.installed-$(cat setup.cfg requirements.txt | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt -e ".[test,notebooks]"
  rm -f .venv/.installed-* && touch "$stamp"
fi

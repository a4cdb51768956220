#!/usr/bin/env bash
# .ci/wheel.sh ARCH OUTDIR
#
# Builds gptcore's abi3 wheel for ARCH (x86_64 or aarch64) for manylinux2014 (glibc 2.17) and
# checks it with `auditwheel show`: the wheel must need nothing newer than glibc 2.17 and no
# shared library outside the manylinux set. The wheel is linked by zig (maturin --zig), which
# links against glibc 2.17's symbol versions whatever the build machine's glibc is; a plain
# build links against the build machine's glibc (2.34+ here) and is refused by older systems.
#
# Tools come from PyPI by name into a venv at $GPTCORE_TOOLS (default
# ${TMPDIR:-/tmp}/gptcore-wheel-tools), reused when present: maturin, ziglang (zig itself, as
# a Python package) and auditwheel. Prints the wheel's path as its last line.
set -euo pipefail
arch=${1:?usage: wheel.sh x86_64|aarch64 OUTDIR}
out=${2:?usage: wheel.sh x86_64|aarch64 OUTDIR}
case $arch in x86_64 | aarch64) ;; *) echo "wheel.sh: ARCH must be x86_64 or aarch64, got $arch" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
target=$arch-unknown-linux-gnu
tools=${GPTCORE_TOOLS:-${TMPDIR:-/tmp}/gptcore-wheel-tools}
tools_key="maturin>=1.7,<2 ziglang auditwheel"

if [ "$(cat "$tools/.key" 2>/dev/null)" != "$tools_key" ]; then
  rm -rf "$tools"
  python3 -m venv "$tools"
  # shellcheck disable=SC2086
  "$tools/bin/python" -m pip install --quiet --disable-pip-version-check $tools_key
  echo "$tools_key" >"$tools/.key"
fi
# maturin looks for a `zig` executable on PATH; the ziglang package runs as `python -m ziglang`.
mkdir -p "$tools/zig-bin"
printf '#!/bin/sh\nexec "%s" -m ziglang "$@"\n' "$tools/bin/python" >"$tools/zig-bin/zig"
chmod +x "$tools/zig-bin/zig"
rustup target list --installed | grep -qx "$target" || rustup target add "$target"

mkdir -p "$out"
rm -f "$out"/gptcore-*-abi3-*"$arch".whl # an earlier build of this one; nothing else
# A target directory of its own: cargo passes the linker to every crate it compiles, so builds
# linked by zig and by gcc in one directory would rebuild everything each time they alternate.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}/zig
# maturin sets zig as the linker; a linker named in the environment would win over it.
unset CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER
PATH="$tools/zig-bin:$tools/bin:$PATH" maturin build --release --quiet --target "$target" \
  --zig --compatibility manylinux2014 --out "$out" >&2
wheel=$(ls "$out"/gptcore-*-abi3-*"$arch".whl)
shown=$("$tools/bin/auditwheel" show "$wheel")
echo "$shown" >&2
# auditwheel names the oldest platform the wheel is consistent with.
if ! tr -s ' \n' ' ' <<<"$shown" | grep -q "platform tag: \"manylinux_2_17_$arch\""; then
  echo "wheel.sh: $(basename "$wheel") is not a manylinux_2_17 (manylinux2014) wheel" >&2
  exit 1
fi
case $(basename "$wheel") in
  *manylinux2014_"$arch"*) ;;
  *) echo "wheel.sh: $(basename "$wheel") is not tagged manylinux2014_$arch" >&2; exit 1 ;;
esac
echo "$wheel"

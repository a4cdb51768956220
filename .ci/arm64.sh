#!/usr/bin/env bash
# .ci/arm64.sh [pytest args...]
#
# gptcore on aarch64, tested on an x86-64 Debian machine under emulation (run as root from
# anywhere in the checkout; .ci/run calls it):
#
#   1. tools     apt-get: the aarch64 cross compiler and C library, qemu-user(-static),
#                debootstrap; rustup: the aarch64 standard library
#   2. rust      the Rust unit tests built for aarch64, run by qemu-aarch64
#   3. wheel     the aarch64 abi3 wheel for manylinux2014, checked by auditwheel (.ci/wheel.sh)
#   4. rootfs    a Debian arm64 root filesystem (debootstrap), CACHED in $ARM64_CACHE
#   5. deps      numpy, pytest, ... as aarch64 wheels in a venv inside it (the host's pip
#                downloads them; cached while the list is unchanged)
#   6. pytest    the wheel installed there, pytest run in a chroot through qemu-aarch64-static
#                registered with binfmt_misc: kernels, model, generation, 16-bit and quantized weights,
#                the Llama family (tests/test_llama_model.py) and the cross-architecture
#                digests (tests/test_digests.py, tests/test_llama_digests.py), for every kernel
#                the aarch64 build offers
#   7. neon-mix  the NEON tile kernels' inner loops read from the aarch64 test executable's
#                disassembly (benches/neon_fmla_mix.py): no spill, bounded overhead a depth
#                step, one widening instruction a B vector against 16-bit B; a kernel that
#                stops meeting it fails the run
#
# pytest args replace the default selection. Environment:
#   ARM64_CACHE           cache directory (default /var/cache/gptcore-arm64); delete it to
#                         start from nothing
#   ARM64_SUITE           Debian release of the root filesystem (default: this host's, so the
#                         C library matches the one the float64 digests were made with)
#   ARM64_MIRROR          Debian mirror (default: the one this host's apt uses)
#   ARM64_PYTEST_TIMEOUT  seconds for the emulated pytest run (default 1500)
#   ARM64_RUST=0          skip the Rust unit tests;  ARM64_WHEEL=FILE  test this wheel
#
# Inside the chroot GPTCORE_EMULATED=1 is set: tests whose time or memory guards emulation
# cannot meet skip with that reason (never loosened natively). Everything mounted for the
# chroot lives in a private mount namespace and goes with it; the binfmt_misc entry (and
# binfmt_misc itself, if this script mounted it) is removed on exit, however the script ends.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
CACHE=${ARM64_CACHE:-/var/cache/gptcore-arm64}
TOOLS=${GPTCORE_TOOLS:-$CACHE/tools} # maturin, zig, auditwheel; its pip fills the rootfs venv
TARGET=aarch64-unknown-linux-gnu
# shellcheck disable=SC1091
SUITE=${ARM64_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")}
ROOTFS=$CACHE/rootfs-$SUITE-arm64
ROOTFS_KEY="1 $SUITE minbase python3"
VENV=/opt/gptcore-venv # inside the root filesystem
# The GPT-2-small-size fixture's 48-position comparison with transformers costs minutes under
# emulation; its cross-architecture bits are checked by test_digests.py (9 positions).
DEFAULT_TESTS=(tests/test_matmul.py tests/test_model.py tests/test_generate.py tests/test_digests.py
  tests/test_weight_formats.py tests/test_llama_model.py tests/test_llama_digests.py
  tests/test_quantized.py::test_fixture_files_compute_with_their_blocks
  tests/test_quantized.py::test_block_packed_matmul_equals_reference_on_dequantized_values
  --deselect tests/test_model.py::test_fixture_gpt2_small_size)
(($#)) || set -- "${DEFAULT_TESTS[@]}"

T0=$SECONDS
PHASE=
PHASE_T0=$SECONDS
TIMES=()
phase() { # phase NAME: ends the current phase (printing its time) and starts NAME
  if [ -n "$PHASE" ]; then
    TIMES+=("$(printf '%-8s %4d s' "$PHASE" $((SECONDS - PHASE_T0)))")
    echo "[arm64] $PHASE: $((SECONDS - PHASE_T0)) s"
  fi
  PHASE=$1
  PHASE_T0=$SECONDS
  [ -z "$PHASE" ] || echo "[arm64] ---- $PHASE (at $((SECONDS - T0)) s)"
}

[ "$(id -u)" = 0 ] || { echo "arm64.sh: needs root (apt-get, debootstrap, binfmt_misc, chroot)" >&2; exit 2; }

# binfmt_misc: cleaned up on every exit -------------------------------------------------
BINFMT=/proc/sys/fs/binfmt_misc
ENTRY=gptcore-aarch64-$$ # one per run: concurrent runs do not remove each other's
MOUNTED_BINFMT=0
REGISTERED=0
cleanup() {
  local rc=$?
  if ((REGISTERED)) && [ -e "$BINFMT/$ENTRY" ]; then echo -1 >"$BINFMT/$ENTRY" || true; fi
  # binfmt_misc is unmounted if this script mounted it and no other entry needs it now.
  if ((MOUNTED_BINFMT)) && [ -z "$(ls "$BINFMT" | grep -vx -e register -e status)" ]; then umount "$BINFMT" || true; fi
  if ((rc)); then echo "[arm64] FAILED in phase '${PHASE:-?}' (exit $rc) after $((SECONDS - T0)) s" >&2; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. tools ------------------------------------------------------------------------------
phase tools
need=()
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
command -v aarch64-linux-gnu-objdump >/dev/null || need+=(binutils-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/lib/libc.so ] || need+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
[ -x /usr/libexec/qemu-binfmt/aarch64-binfmt-P ] || need+=(qemu-user-static)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v unshare >/dev/null || need+=(util-linux)
if ((${#need[@]})); then
  echo "[arm64] apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
    --no-install-recommends "${need[@]}" >/dev/null
fi
rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET"
mkdir -p "$CACHE"
[ -x "$TOOLS/bin/python" ] || python3 -m venv "$TOOLS" # wheel.sh fills it

# 2. rust -------------------------------------------------------------------------------
phase rust
# gcc links the test executable, qemu-aarch64 runs it (only here: the wheel is linked by zig).
cargo_arm64() {
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu" \
    cargo "$@"
}
if [ "${ARM64_RUST:-1}" = 0 ]; then
  echo "[arm64] skipped (ARM64_RUST=0)"
else
  cargo_arm64 test -p gptcore-core --release --target "$TARGET"
fi

# 3. wheel ------------------------------------------------------------------------------
phase wheel
if [ -n "${ARM64_WHEEL:-}" ]; then
  WHEEL=$(realpath "$ARM64_WHEEL")
else
  WHEEL=$(GPTCORE_TOOLS=$TOOLS bash .ci/wheel.sh aarch64 "${CARGO_TARGET_DIR:-$REPO/target}/wheels-aarch64" | tail -1)
fi
echo "[arm64] wheel: $(basename "$WHEEL")"

# 4. rootfs (cached) --------------------------------------------------------------------
phase rootfs
# binfmt_misc: arm64 ELF files run by the static qemu. The F flag opens the interpreter now,
# so it also works inside the chroot; a new entry goes before older ones, so an existing
# qemu-aarch64 entry (without F) is left alone and shadowed only while this script runs.
if [ ! -e "$BINFMT/register" ]; then
  mount -t binfmt_misc binfmt_misc "$BINFMT"
  MOUNTED_BINFMT=1
fi
if [ ! -e "$BINFMT/$ENTRY" ]; then
  magic='\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
  mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
  echo ":$ENTRY:M::$magic:$mask:/usr/libexec/qemu-binfmt/aarch64-binfmt-P:OPF" >"$BINFMT/register"
  REGISTERED=1
fi

mounted_under() { awk -v p="$1" '$5 == p || index($5, p "/") == 1 {f = 1} END {exit !f}' /proc/self/mountinfo; }
if [ "$(cat "$ROOTFS/.gptcore-key" 2>/dev/null)" != "$ROOTFS_KEY" ]; then
  for d in "$ROOTFS" "$ROOTFS.partial"; do
    if mounted_under "$d"; then echo "arm64.sh: something is mounted under $d; not deleting it" >&2; exit 1; fi
    rm -rf "$d"
  done
  # The Debian mirror this host's apt uses (deb822 sources, then sources.list).
  mirror=${ARM64_MIRROR:-$({ cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true; } |
    awk '/^URIs:/ {print $2} /^deb / {print $2}' | grep -v security | head -1 || true)}
  mirror=${mirror:-http://deb.debian.org/debian}
  echo "[arm64] debootstrap $SUITE arm64 from $mirror (log: $CACHE/debootstrap.log)"
  # The second stage runs arm64 programs through the binfmt entry; the /proc and /sys that
  # debootstrap mounts inside the new tree stay in a private mount namespace.
  unshare --mount --propagation private -- debootstrap --arch=arm64 --variant=minbase --include=python3 \
    "$SUITE" "$ROOTFS.partial" "$mirror" >"$CACHE/debootstrap.log" 2>&1 ||
    { tail -30 "$CACHE/debootstrap.log" >&2; exit 1; }
  rm -rf "$ROOTFS.partial/var/cache/apt/archives/"*.deb "$ROOTFS.partial/var/lib/apt/lists/"*_Packages
  mv "$ROOTFS.partial" "$ROOTFS"
  echo "$ROOTFS_KEY" >"$ROOTFS/.gptcore-key"
fi

# in_root SECONDS CMD...: run CMD in the chroot (killed after SECONDS), with /proc, /dev, /sys,
# a fresh /tmp and the checkout at /src mounted in a private mount namespace: they go when CMD
# ends, whatever way it ends.
in_root() {
  local limit=$1
  shift
  timeout -k 30 "$limit" unshare --mount --propagation private -- /bin/bash -euc '
    R=$1; SRC=$2; shift 2
    mount -t proc proc "$R/proc"
    mount --rbind /dev "$R/dev"
    mount --rbind /sys "$R/sys"
    mount -t tmpfs tmpfs "$R/tmp"
    mkdir -p "$R/src"
    mount --bind "$SRC" "$R/src"
    exec chroot "$R" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/bin:/bin:/usr/sbin:/sbin \
      GPTCORE_EMULATED=1 PYTHONDONTWRITEBYTECODE=1 MPLBACKEND=Agg "$@"
  ' in_root "$ROOTFS" "$REPO" "$@"
}

PYVER=$(chroot "$ROOTFS" /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
GLIBC=$(chroot "$ROOTFS" /usr/bin/ldd --version | awk 'NR == 1 {print $NF}')
echo "[arm64] root filesystem: Debian $SUITE arm64 ($(chroot "$ROOTFS" /usr/bin/uname -m)), Python $PYVER, glibc $GLIBC"

# 5. deps (cached) ----------------------------------------------------------------------
phase deps
# The package's own dependencies (from pyproject.toml) and what the selected tests import.
mapfile -t PYDEPS < <("$TOOLS/bin/python" - <<'EOF'
import tomllib
with open("pyproject.toml", "rb") as fh:
    project = tomllib.load(fh)["project"]
# safetensors: the Llama tests' numpy reference reads the fixture folders with it; gguf: the
# quantized tests' independent reference for the blocks (test_quantized.py).
for d in project["dependencies"] + ["pytest>=7", "hypothesis>=6", "safetensors>=0.4", "gguf>=0.10"]:
    print(d)
EOF
)
SITE=$ROOTFS$VENV/lib/python$PYVER/site-packages
# The host's pip fills the venv with aarch64 wheels for the root filesystem's Python and glibc
# (pip --platform does not widen manylinux_2_X to older glibcs: each one is listed).
pip_arm64() {
  local plats=() v
  for v in $(seq 17 "${GLIBC#2.}"); do plats+=(--platform "manylinux_2_${v}_aarch64"); done
  "$TOOLS/bin/python" -m pip install --quiet --disable-pip-version-check --no-warn-conflicts \
    --no-warn-script-location --upgrade --target "$SITE" --only-binary=:all: \
    "${plats[@]}" --platform manylinux2014_aarch64 --python-version "$PYVER" --implementation cp \
    --abi "cp${PYVER/./}" --abi abi3 --abi none "$@"
}
DEPS_KEY="$PYVER $GLIBC ${PYDEPS[*]}"
if [ "$(cat "$ROOTFS$VENV/.deps-key" 2>/dev/null)" != "$DEPS_KEY" ]; then
  echo "[arm64] venv with ${PYDEPS[*]}"
  rm -rf "${ROOTFS:?}$VENV"
  chroot "$ROOTFS" /usr/bin/python3 -m venv --without-pip "$VENV"
  pip_arm64 "${PYDEPS[@]}"
  echo "$DEPS_KEY" >"$ROOTFS$VENV/.deps-key"
fi
rm -rf "$SITE"/gptcore "$SITE"/gptcore-*.dist-info
pip_arm64 --no-deps "$WHEEL"

# 6. pytest (emulated) ------------------------------------------------------------------
phase pytest
# The kernels this build offers; once a NEON kernel is in the source it must be among them.
KERNELS=$(in_root 300 "$VENV/bin/python" -c 'import gptcore; print(" ".join(gptcore.available_kernels()))')
echo "[arm64] kernels: $KERNELS"
if compgen -G "rust/core/src/kernels/neon/*.rs" >/dev/null && ! grep -qw neon <<<"$KERNELS"; then
  echo "arm64.sh: the source has NEON kernels but the aarch64 build does not offer 'neon'" >&2
  exit 1
fi
echo "[arm64] pytest $*"
in_root "${ARM64_PYTEST_TIMEOUT:-1500}" /bin/sh -c 'cd /src && exec "$0" -m pytest -p no:cacheprovider -q "$@"' \
  "$VENV/bin/python" "$@" || {
  rc=$?
  ((rc != 124)) || echo "arm64.sh: pytest ran past ${ARM64_PYTEST_TIMEOUT:-1500} s" >&2
  exit $rc
}

# The NEON tile kernels' inner loops, read from the Rust test executable (release code
# generation, symbol names kept; the wheel's are not): a kernel that spills or spends more than
# the script's bound of instructions a depth step beside its fmla and loads fails the run.
phase neon-mix
TESTBIN=$(cargo_arm64 test -p gptcore-core --release --target "$TARGET" --no-run --message-format=json 2>/dev/null |
  "$TOOLS/bin/python" -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "gptcore_core":
        print(m["executable"])' | tail -1)
[ -n "$TESTBIN" ] || { echo "arm64.sh: no aarch64 test executable for the NEON check" >&2; exit 1; }
"$TOOLS/bin/python" benches/neon_fmla_mix.py "$TESTBIN"
phase ""
echo "[arm64] times:"
printf '[arm64]   %s\n' "${TIMES[@]}"
echo "[arm64] total: $((SECONDS - T0)) s"

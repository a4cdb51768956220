"""The instruction mix of the aarch64 tile kernels' inner loops, from the disassembly.

    python benches/neon_mix.py                   # builds gptcore-core for aarch64 (release)
    python benches/neon_mix.py FILE              # an aarch64 ELF file, .rlib/.a archive or wheel
    python benches/neon_mix.py --check           # exit 1 if a NEON kernel misses the targets

Speed on ARM cannot be measured on an x86 machine, but the code can be read: for every
function whose (demangled) name matches ``--match`` (default: NEON kernels, ``neon`` and
``kernel`` in the name) this prints each innermost loop of the machine code (a backward
branch and the instructions it jumps over), how many instructions it has, the share of
``fmla`` (vector fused multiply-add) among them, and whether it touches the stack
(``ldr``/``str``/``ldp``/``stp``... addressed from ``sp``: register spills). The loop with the
most ``fmla`` is the kernel's inner loop. Targets (issue 18): at least 70 % ``fmla``, no
spills. ``--match portable`` shows the portable kernel for comparison (scalar ``fmadd``, one
element at a time).

Without FILE the script runs ``cargo build -p gptcore-core --release --target
aarch64-unknown-linux-gnu`` and reads the library archive (the release profile's code
generation, before the wheel's link-time optimisation; the wheel's own library is stripped of
symbol names). Needs ``aarch64-linux-gnu-objdump`` (Debian: binutils-aarch64-linux-gnu) and,
to build, the Rust target ``aarch64-unknown-linux-gnu``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
TARGET = "aarch64-unknown-linux-gnu"
FMLA_TARGET = 0.70
BRANCHES = re.compile(r"^(b|b\.\w+|cbz|cbnz|tbz|tbnz)$")
STACK_ACCESS = re.compile(r"^(ldr|str|ldp|stp|ldur|stur|ldnp|stnp)\w*$")
SP_OPERAND = re.compile(r"\[sp\b")


@dataclass
class Insn:
    addr: int
    op: str
    args: str


@dataclass
class Function:
    name: str
    insns: List[Insn] = field(default_factory=list)


@dataclass
class Loop:
    start: int
    end: int
    insns: List[Insn]

    @property
    def fmla(self) -> int:
        return sum(1 for i in self.insns if i.op == "fmla")

    @property
    def fmadd(self) -> int:
        return sum(1 for i in self.insns if i.op in ("fmadd", "fmsub", "fnmadd", "fnmsub"))

    @property
    def precision(self) -> str:
        """float32 or float64, from the registers the multiply-adds use."""
        ops = " ".join(i.args for i in self.insns if i.op in ("fmla", "fmadd"))
        single = len(re.findall(r"\.4s|\.s\[|\bs\d+\b", ops))
        double = len(re.findall(r"\.2d|\.d\[|\bd\d+\b", ops))
        return "float32" if single > double else "float64" if double else "?"

    @property
    def spills(self) -> List[Insn]:
        return [i for i in self.insns if STACK_ACCESS.match(i.op) and SP_OPERAND.search(i.args)]


def objdump() -> str:
    for tool in ("aarch64-linux-gnu-objdump", "llvm-objdump"):
        if shutil.which(tool):
            return tool
    sys.exit("neon_mix: needs aarch64-linux-gnu-objdump (apt-get install binutils-aarch64-linux-gnu)")


def build() -> Path:
    target_dir = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    subprocess.run(["cargo", "build", "-p", "gptcore-core", "--release", "--target", TARGET, "--quiet"],
                   cwd=ROOT, check=True)
    lib = target_dir / TARGET / "release" / "libgptcore_core.rlib"
    if not lib.exists():
        sys.exit(f"neon_mix: cargo built no {lib}")
    return lib


def disassemble(path: Path) -> List[Function]:
    out = subprocess.run([objdump(), "-d", "-C", "--no-show-raw-insn", str(path)],
                         capture_output=True, text=True, check=True).stdout
    funcs: List[Function] = []
    head = re.compile(r"^([0-9a-f]+) <(.*)>:$")
    line_re = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
    for line in out.splitlines():
        m = head.match(line)
        if m:
            funcs.append(Function(m.group(2)))
            continue
        m = line_re.match(line)
        if m and funcs:
            args = m.group(3).split("//")[0].strip()
            funcs[-1].insns.append(Insn(int(m.group(1), 16), m.group(2), args))
    return funcs


def loops(f: Function) -> List[Loop]:
    """Innermost loops: backward branches within the function whose range holds no other."""
    found: List[Tuple[int, int]] = []
    addrs = {i.addr for i in f.insns}
    for i in f.insns:
        if not BRANCHES.match(i.op):
            continue
        # The branch target is the last operand: an address, maybe followed by <symbol+off>.
        m = re.search(r"(?:^|,\s*)#?(?:0x)?([0-9a-f]+)(?:\s+<[^>]*>)?$", i.args)
        if not m:
            continue
        to = int(m.group(1), 16)
        if to <= i.addr and to in addrs:
            found.append((to, i.addr))
    inner = [(s, e) for (s, e) in found if not any((s2, e2) != (s, e) and s <= s2 and e2 <= e for s2, e2 in found)]
    return [Loop(s, e, [i for i in f.insns if s <= i.addr <= e]) for s, e in sorted(set(inner))]


def wheel_library(path: Path, tmp: str) -> Path:
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if re.search(r"_native.*\.so$", n)]
        if not names:
            sys.exit(f"neon_mix: no _native library in {path}")
        return Path(z.extract(names[0], tmp))


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", type=Path, help="aarch64 ELF, .rlib/.a or wheel (default: build)")
    ap.add_argument("--match", default="neon.*kernel|kernel.*neon",
                    help="regular expression for the functions to read (default: %(default)s)")
    ap.add_argument("--check", action="store_true",
                    help=f"exit 1 unless every matched function's inner loop is >= {FMLA_TARGET * 100:.0f}%% fmla, no spills")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.file or build()
        if path.suffix == ".whl":
            path = wheel_library(path, tmp)
        funcs = disassemble(path)
    pattern = re.compile(args.match, re.IGNORECASE)
    chosen: Dict[str, List[Function]] = {}
    for f in funcs:
        if pattern.search(f.name):
            chosen.setdefault(f.name, []).append(f)
    print(f"{path.name}: {len(funcs)} functions, {sum(len(v) for v in chosen.values())} matching /{args.match}/")
    if not chosen:
        print("  none: this build has no such function (or its names were stripped, as in the wheel)")
        return 1 if args.check else 0
    failed = 0
    for name, copies in sorted(chosen.items()):
        for n, f in enumerate(copies):
            label = name if len(copies) == 1 else f"{name} [{n + 1}/{len(copies)}]"
            ls = [l for l in loops(f) if l.fmla or l.fmadd]
            if not ls:
                print(f"\n{label}\n  no loop with a multiply-add ({len(f.insns)} instructions)")
                failed += 1
                continue
            main_loop = max(ls, key=lambda l: (l.fmla, l.fmadd))
            print(f"\n{label}  ({main_loop.precision}, {len(f.insns)} instructions)")
            for l in ls:
                mark = "*" if l is main_loop else " "
                share = l.fmla / len(l.insns)
                spills = l.spills
                print(f" {mark} loop {l.start:#x}-{l.end:#x}: {len(l.insns):4d} instructions, "
                      f"fmla {l.fmla:3d} ({share:6.1%}), scalar fmadd {l.fmadd:3d}, "
                      f"stack accesses {len(spills)}{' (spills)' if spills else ''}")
            ok = main_loop.fmla / len(main_loop.insns) >= FMLA_TARGET and not main_loop.spills
            print(f"   inner loop (*): {'meets' if ok else 'MISSES'} the target "
                  f"(>= {FMLA_TARGET:.0%} fmla, no spills)")
            failed += not ok
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())

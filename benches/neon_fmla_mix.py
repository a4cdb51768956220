"""The instruction mix of the NEON micro-kernels' inner loops, from their disassembly: a check.

Speed on ARM cannot be measured under emulation, so the tile kernels' code is checked instead.
In every innermost loop of the tile kernels (`neon::kernel_f32`, `neon::kernel_f64` and the
`tile_*` functions they call, one per register block) that does arithmetic, a depth step of a
block of R rows x W vectors must issue its R x W `fmla` and load its W vectors of B and its A
values; every other instruction is overhead: an address addition a step for each half of a
panel whose layout (`ldb`, `hoff`) comes at run time, and the loop's counter, branch and two
pointer increments over an unroll of two or four steps, at most 2 + 4 / 2 = 4 instructions a
step. The tile kernels against bfloat16 and float16 B (`neon::kernel_bf16`, `kernel_f16` and
their `tile_bf16`, `tile_f16`) run the same blocks with each B vector loaded as 8 bytes and
widened in a register: one widening instruction a B vector (`shll` by 16 for bfloat16, `fcvtl`
for float16), W a step, no fewer possible (a 16-bit value must move to the top or be converted
before a float32 `fmla` reads it) and no more allowed; beside the widening the same bound of
overhead holds. The script fails (exit status 1) when a checked loop loads or stores relative
to the stack pointer (a spill: the block no longer fits the registers), spends more than
`--max-overhead` (4) instructions a depth step on overhead (a block that lost its unrolling or
its addressing), or, against 16-bit B, widens other than once a B vector. `.ci/arm64.sh` runs
it on every build, so CI fails when the kernels stop meeting it. The wide and stream kernels
(the wide ones against 16-bit B too) and the tile kernels against the block formats q8_0 and
q4_0 (`neon::blocks`: each 8-column group of a step widened from bytes by about eight
instructions, the block's scales loaded once a block of 32 steps) are listed too, for
information.

Why not a share of `fmla` among all instructions (70 % was the first target): the share is set
by the block's shape before any overhead. A block of R rows issues R `fmla` per B vector and
loads two B vectors an instruction (`ldp`): with no overhead at all a one-row block reaches
62 % (its A load included), a two-row block 76 %; the address of each half of a panel and the
loop's counting then bring the compiled two-row blocks to 67 %, with 2.75 instructions of
overhead a step, no more than the other blocks' 3 to 3.5. A core whose front end issues more
instructions a cycle than it has FMA pipes keeps the pipes busy as long as the other
instructions fit in the slots the `fmla` leave, so the share alone says little; what the code
can get wrong, and what this checks, is spills and overhead. The share, and the share a block
would have with no overhead, are printed beside it.

    # on an ARM machine: builds the core's test executable and reads it
    python3 benches/neon_fmla_mix.py

    # cross-built on x86-64 (Debian: gcc-aarch64-linux-gnu, binutils-aarch64-linux-gnu)
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
        python3 benches/neon_fmla_mix.py --target aarch64-unknown-linux-gnu

    # or any aarch64 executable or object holding the kernels
    python3 benches/neon_fmla_mix.py path/to/binary

The release profile links with fat LTO, so the rlib holds LLVM bitcode, not machine code: the
test executable (built with the same profile) is what is read.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys

TILE = ("kernel_f32", "kernel_f64", "tile_f32", "tile_f64")
# The tile kernels against 16-bit B: checked like the float32 ones, their widening apart.
TILE16 = ("kernel_bf16", "kernel_f16", "tile_bf16", "tile_f16")
OTHER = ("wide_f32", "wide_f64", "stream_f32", "stream_f64",
         "wide_bf16", "wide_f16", "tile_q8_0", "tile_q4_0")
# One instruction that widens a 16-bit B vector to float32 in a register (bfloat16: a shift
# into the top half, or a zip with zeros; float16: a conversion).
WIDEN = ("shll", "shll2", "ushll", "ushll2", "fcvtl", "fcvtl2", "zip1", "zip2")
WIDENED = TILE16 + ("wide_bf16", "wide_f16")
LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
FUNC = re.compile(r"^[0-9a-f]+ <(.+)>:$")
BRANCH = re.compile(r"^(b|b\.\w+|cbn?z|tbn?z)$")


def objdump_tool() -> str:
    for name in ("aarch64-linux-gnu-objdump", "llvm-objdump"):
        if shutil.which(name):
            return name
    if platform.machine() in ("aarch64", "arm64") and shutil.which("objdump"):
        return "objdump"
    sys.exit("no objdump for aarch64 found (install binutils-aarch64-linux-gnu)")


def functions(path: str) -> dict[str, list[tuple[int, str, str]]]:
    """Every NEON kernel function in `path`: a list of (address, mnemonic, operands)."""
    # Not check=True: objdump fails on archive members it cannot read (bitcode) but still
    # prints the others.
    out = subprocess.run(
        [objdump_tool(), "-d", "--no-show-raw-insn", "-C", path],
        check=False,
        capture_output=True,
        text=True,
    ).stdout
    funcs: dict[str, list[tuple[int, str, str]]] = {}
    current = None
    for line in out.splitlines():
        m = FUNC.match(line)
        if m:
            name = m.group(1)
            short = name.split("::")[-1].split("<")[0]
            current = None
            if "kernels::neon::" in name and short in TILE + TILE16 + OTHER:
                current = funcs.setdefault(short, [])
            continue
        m = LINE.match(line)
        if m and current is not None:
            current.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return funcs


def test_executable(target: str | None) -> str:
    """Build gptcore-core's test executable (release profile) and return its path."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = ["cargo", "test", "-p", "gptcore-core", "--release", "--no-run"]
    cmd += ["--message-format=json"] + (["--target", target] if target else [])
    out = subprocess.run(
        cmd, cwd=root, check=True, capture_output=True, text=True
    ).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if (
            msg.get("reason") == "compiler-artifact"
            and msg.get("executable")
            and msg["target"]["name"] == "gptcore_core"
        ):
            return msg["executable"]
    sys.exit("cargo built no test executable for gptcore_core")


def inner_loops(code: list[tuple[int, str, str]]) -> list[list[tuple[int, str, str]]]:
    """The innermost loops: a conditional branch back to an address before it with no other
    branch in between (a loop of one basic block, as the depth loops are). A backward jump
    into code shared by two paths is not a loop and is not counted."""
    loops = []
    for idx, (addr, op, args) in enumerate(code):
        if not BRANCH.match(op) or op == "b":
            continue
        target = re.search(r"\b([0-9a-f]+) <", args)
        if not target or int(target.group(1), 16) > addr:
            continue
        start = int(target.group(1), 16)
        body = [ins for ins in code[: idx + 1] if ins[0] >= start]
        if not any(BRANCH.match(op2) for _, op2, _ in body[:-1]):
            loops.append(body)
    return loops


def reg(operand: str) -> str:
    """The register number of `q17`, `v17.4s`, `v17.s[2]`, `d3`..."""
    m = re.match(r"\{?[qdsv](\d+)", operand.strip())
    return m.group(1) if m else operand.strip()


def vector_loads(body: list[tuple[int, str, str]]) -> int:
    """Load instructions into vector registers (`ldp` of two vectors counts once)."""
    return sum(1 for _, op, args in body if op.startswith("ld") and re.match(r"[{qdsv]", args))


def block_shape(body: list[tuple[int, str, str]]) -> tuple[int, int, int]:
    """(rows, accumulators, B vectors) of the register block a loop computes: accumulators are
    the distinct fmla destinations; B vectors the distinct values fmla multiply by lane (a
    value of a register written by a load or a widening instruction); rows the fmla per B
    vector (each B vector meets one A lane per row)."""
    version: dict[str, int] = {}
    b_vectors = set()
    accs = set()
    fmla = 0
    for _, op, args in body:
        ops = re.split(r",\s*(?![^{]*\})", args)  # commas outside register lists
        if op.startswith("ld") and re.match(r"[{qdsv]", args):  # into vector registers
            names = ops[:2] if op == "ldp" else re.findall(r"[qdsv]\d+", ops[0])
            for n in names:
                version[reg(n)] = version.get(reg(n), 0) + 1
        elif op in WIDEN:
            version[reg(ops[0])] = version.get(reg(ops[0]), 0) + 1
        elif op == "fmla":
            fmla += 1
            accs.add(reg(ops[0]))
            b_vectors.add((reg(ops[1]), version.get(reg(ops[1]), 0)))
    rows = round(fmla / max(len(b_vectors), 1))
    return rows, len(accs), len(b_vectors)


def spills(body: list[tuple[int, str, str]]) -> int:
    return sum(1 for _, op, args in body if re.match(r"(ld|st)", op) and "[sp" in args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary", nargs="?", help="aarch64 executable or object (default: build)")
    ap.add_argument("--target", help="cargo target when building, e.g. aarch64-unknown-linux-gnu")
    ap.add_argument("--max-overhead", type=float, default=4.0,
                    help="instructions a depth step beyond the fmla and the vector loads")
    args = ap.parse_args()
    binary = args.binary or test_executable(args.target)
    funcs = functions(binary)
    missing = [f for f in TILE + TILE16 if f not in funcs]
    if missing:
        sys.exit(f"not found in {binary}: {', '.join(missing)}")
    ok = True
    checked = 0
    print(
        "| function | loop | block (rows x vectors) | instructions | fmla | share"
        " | share without overhead | widening a step | overhead a step | stack loads/stores |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in TILE + TILE16 + OTHER:
        if name not in funcs:
            continue
        for body in inner_loops(funcs[name]):
            fmla = sum(1 for _, op, _ in body if op == "fmla")
            if fmla == 0:
                continue  # copies and edge handling, not arithmetic
            rows, accs, b_vectors = block_shape(body)
            loads = vector_loads(body)
            widens = sum(1 for _, op, _ in body if op in WIDEN) if name in WIDENED else 0
            share = fmla / len(body)
            sp = spills(body)
            # The stream kernels keep C in memory: no register block, no depth steps to count.
            if name.startswith("stream"):
                shape, floor, per_step, widen_step = "-", "-", "-", "-"
            else:
                shape = f"{rows} x {accs // max(rows, 1)}"
                steps = fmla / max(accs, 1)
                floor = f"{fmla / (fmla + loads + widens):.0%}"
                per_step = (len(body) - fmla - loads - widens) / steps
                widen_step = f"{widens / steps:.2f}" if name in WIDENED else "-"
            flag = ""
            if name in TILE + TILE16:
                checked += 1
                # Against 16-bit B: one widening instruction for each B vector, no more.
                widened_once = name not in TILE16 or widens == b_vectors
                if sp or per_step > args.max_overhead or not widened_once:
                    ok = False
                    flag = " **target missed**"
            per_step_text = per_step if isinstance(per_step, str) else f"{per_step:.2f}"
            print(
                f"| {name} | {body[0][0]:#x} | {shape} | {len(body)} | {fmla} | {share:.0%}"
                f" | {floor} | {widen_step} | {per_step_text}{flag} | {sp} |"
            )
    print()
    if checked == 0:
        print("tile kernels: no arithmetic loop found")
        return 1
    print(f"tile kernels ({checked} loops):", "no spill, at most "
          f"{args.max_overhead:g} overhead instructions a depth step, one widening a 16-bit B "
          "vector" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

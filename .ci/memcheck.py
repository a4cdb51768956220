"""The Rust tests of gptcore-core under valgrind's memcheck.

Every out-of-bounds read or write in the unsafe packing, kernel (AVX2 and portable; valgrind does
not run AVX-512) and attention code fails the run. valgrind runs one process's threads one at a
time, so each test runs in a valgrind process of its own, as many side by side as there are CPUs
(a queue: a CPU takes the next test when its test ends). The run fails if any test fails, reports
a memory error, or does not run (each process must report exactly one test passed).

Run from the repository root after `cargo test -p gptcore-core --release` has built the tests:

    python3 .ci/memcheck.py [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rust" / "core"


def test_binaries() -> list[str]:
    """The test executables of gptcore-core's release build (built if they are not)."""
    out = subprocess.run(
        ["cargo", "test", "-p", "gptcore-core", "--release", "--no-run", "--message-format=json"],
        cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True,
    ).stdout
    found = []
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]:
            found.append(msg["executable"])
    return found


def test_names(binary: str) -> list[str]:
    out = subprocess.run([binary, "--list"], cwd=PACKAGE, check=True, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True).stdout
    return [line[: -len(": test")] for line in out.splitlines() if line.endswith(": test")]


def run_one(binary: str, name: str) -> tuple[str, float, bool, str]:
    """Runs one test under memcheck: (name, seconds, passed, output)."""
    start = time.monotonic()
    # The tests run with the package's directory as the working directory, as under `cargo test`.
    proc = subprocess.run(
        ["valgrind", "-q", "--error-exitcode=3", binary, "--exact", name],
        cwd=PACKAGE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    seconds = time.monotonic() - start
    passed = proc.returncode == 0 and "test result: ok. 1 passed;" in proc.stdout
    return name, seconds, passed, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="valgrind processes side by side (default: the CPUs)")
    args = parser.parse_args()
    work = [(b, n) for b in test_binaries() for n in test_names(b)]
    if not work:
        print("memcheck: no tests found", file=sys.stderr)
        return 1
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda bn: run_one(*bn), work))
    wall = time.monotonic() - start
    failed = [r for r in results if not r[2]]
    for name, seconds, passed, _ in sorted(results, key=lambda r: -r[1])[:10]:
        print(f"memcheck: {seconds:7.1f} s  {name}")
    for name, _, _, output in failed:
        print(f"memcheck: FAILED {name}\n{output}")
    print(f"memcheck: {len(results) - len(failed)} of {len(results)} tests passed under valgrind, "
          f"{args.jobs} at a time, in {wall:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

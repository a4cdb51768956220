#!/usr/bin/env python3
"""Fuzz gptcore's checkpoint readers with mutated files: safetensors (gptcore.load /
gptcore.load_safetensors, the default) or GGUF (``--target gguf``: gptcore.gguf's reader and
gptcore.load).

With atheris (``pip install atheris``), coverage-guided through libFuzzer:

    PYTHONPATH=python python3 fuzz/fuzz_loader.py -max_total_time=300

Without it, or with ``--loop``, a plain random loop over the same mutator:

    PYTHONPATH=python python3 fuzz/fuzz_loader.py --loop --seconds 300

Every input is loaded several ways (see check_bytes in loader_target.py / gguf_target.py). An
exception outside the target's ALLOWED, a crash, a hang (libFuzzer's -timeout, or --timeout in
the loop) or running out of memory (-rss_limit_mb) is a finding: atheris writes the input to
the target's crasher folder (fuzz/corpus/crashers/ or fuzz/corpus/gguf-crashers/; crash-*,
timeout-*, oom-*), the loop writes it there as loop-<hash>. Add a finding to the regression
tests (tests/test_loader_fuzz.py, tests/test_gguf_fuzz.py) simply by keeping the file.
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import importlib
import os
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
#: target name -> (module, folder of its findings)
TARGETS = {
    "safetensors": ("loader_target", HERE / "corpus" / "crashers"),
    "gguf": ("gguf_target", HERE / "corpus" / "gguf-crashers"),
}
TARGET, CRASHERS = TARGETS["safetensors"]


def _target():
    return importlib.import_module(TARGET)


def _write_seeds(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in _target().seeds().items():
        (folder / name).write_bytes(data)


def run_atheris(argv, skip_known: bool) -> None:
    import atheris

    with atheris.instrument_imports(include=["gptcore", TARGET]):
        import gptcore  # noqa: F401
        target = _target()
    Workdir, check_bytes, known_bug, mutate = target.Workdir, target.check_bytes, target.known_bug, target.mutate

    work = Workdir()

    def test_one_input(data: bytes) -> None:
        if skip_known and known_bug(data):
            return
        check_bytes(data, work)

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.2:
            return atheris.Mutate(data, max_size)
        try:
            out = mutate(data, rng)
        except Exception:  # a mutator bug must not read as a finding in gptcore
            traceback.print_exc()
            out = atheris.Mutate(data, max_size)
        return out[:max_size]

    corpus = [a for a in argv[1:] if not a.startswith("-")]
    if not corpus:
        folder = Path(tempfile.mkdtemp(prefix="gptcore-fuzz-corpus-"))
        _write_seeds(folder)
        argv = argv + [str(folder)]
        print(f"corpus: {folder}", flush=True)
    CRASHERS.mkdir(parents=True, exist_ok=True)
    defaults = {
        "-artifact_prefix": str(CRASHERS) + os.sep,
        "-timeout": "20",
        "-rss_limit_mb": "4096",
        "-max_len": "400000",
    }
    for flag, value in defaults.items():
        if not any(a.startswith(flag + "=") for a in argv):
            argv.append(f"{flag}={value}")
    atheris.Setup(argv, test_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()


def run_restarting(total: float, argv) -> None:
    """Run the atheris fuzzer again after each finding until ``total`` seconds have passed,
    sharing one corpus folder (what libFuzzer's -fork mode does, which atheris lacks)."""
    import subprocess

    corpus = [a for a in argv if not a.startswith("-")]
    if not corpus:
        folder = Path(tempfile.mkdtemp(prefix="gptcore-fuzz-corpus-"))
        _write_seeds(folder)
        corpus = [str(folder)]
        print(f"corpus: {folder}", flush=True)
    flags = [a for a in argv if a.startswith("-") and not a.startswith("-max_total_time")]
    start, runs = time.monotonic(), 0
    while True:
        left = int(total - (time.monotonic() - start))
        if left < 5:
            break
        runs += 1
        cmd = [sys.executable, __file__, *flags, f"-max_total_time={left}", *corpus]
        rc = subprocess.run(cmd).returncode
        print(f"run {runs} ended with status {rc} after {time.monotonic() - start:.0f} s", flush=True)
    print(f"restarting fuzzer: {runs} runs in {time.monotonic() - start:.0f} s")


def run_loop(seconds: float, timeout: float, seed: int, skip_known: bool) -> int:
    """Random mutation loop: mutate a seed or a previously generated input (up to 4 edits
    deep), load it, record findings. Returns the number of findings."""
    target = _target()
    Workdir, check_bytes, known_bug, mutate, seeds = (target.Workdir, target.check_bytes, target.known_bug,
                                                      target.mutate, target.seeds)

    rng = random.Random(seed)
    pool = list(seeds().values())
    work = Workdir()
    CRASHERS.mkdir(parents=True, exist_ok=True)
    current = work.root / "current-input"
    print(f"each input is written to {current} before it is loaded (after a hang, it is the culprit)", flush=True)
    findings = n = loaded = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            data = rng.choice(pool)
            try:
                for _ in range(rng.randint(1, 4)):
                    data = mutate(data, rng)
            except Exception:  # a mutator bug must not read as a finding in gptcore
                traceback.print_exc()
                continue
            if skip_known and known_bug(data):
                continue
            current.write_bytes(data)
            # A hang inside C code cannot be interrupted: dump the stacks and exit, leaving
            # the input in `current` (printed below) for the record.
            faulthandler.dump_traceback_later(timeout, exit=True)
            try:
                loaded += check_bytes(data, work) > 0
            except Exception:
                findings += 1
                name = CRASHERS / f"loop-{hashlib.sha1(data).hexdigest()[:16]}"
                name.write_bytes(data)
                print(f"FINDING {name.name}:\n{traceback.format_exc()}", flush=True)
            finally:
                faulthandler.cancel_dump_traceback_later()
            n += 1
            if rng.random() < 0.05 and len(pool) < 200:
                pool.append(data)
            if n % 2000 == 0:
                print(f"{n} inputs, {loaded} loaded, {findings} findings, {time.monotonic() - start:.0f} s", flush=True)
    finally:
        work.close()
    print(f"done: {n} inputs in {time.monotonic() - start:.0f} s, {loaded} loaded a model, {findings} findings")
    return findings


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], add_help=False)
    p.add_argument("--loop", action="store_true", help="plain random loop instead of atheris")
    p.add_argument("--seconds", type=float, default=60.0, help="loop: how long to run")
    p.add_argument("--timeout", type=float, default=20.0, help="loop: seconds before an input counts as a hang")
    p.add_argument("--seed", type=int, default=0, help="loop: random seed")
    p.add_argument("--skip-known", action="store_true", help="skip inputs that hit a known, unfixed bug")
    p.add_argument("--total", type=float, default=0, help="atheris: restart after each finding until this many seconds")
    p.add_argument("--target", choices=sorted(TARGETS), default="safetensors", help="which reader to fuzz")
    args, rest = p.parse_known_args()
    global TARGET, CRASHERS
    TARGET, CRASHERS = TARGETS[args.target]
    if not args.loop:
        try:
            import atheris  # noqa: F401
        except ImportError:
            print("atheris is not installed; running the plain loop", file=sys.stderr)
            args.loop = True
    if args.loop:
        sys.exit(1 if run_loop(args.seconds, args.timeout, args.seed, args.skip_known) else 0)
    if args.total:
        run_restarting(args.total, rest + (["--skip-known"] if args.skip_known else []) + [f"--target={args.target}"])
        return
    run_atheris([sys.argv[0]] + rest, args.skip_known)


if __name__ == "__main__":
    main()

"""What a `trialbox` command pays before it does anything: the interpreter's start and the
imports its parser needs.

Times, as fresh processes, `trialbox --help` and `trialbox run --help` against the floor of
`python3 -c pass` in the same run, with two peers: `import orchestrator` (the public API, its
names imported on first use) and `from orchestrator import *` (every public name imported:
what each command paid before the parsers were built from light imports). The rows alternate
in rounds, so drift on a shared machine hits them all. Prints best / median / worst wall time
per row and the best minus the floor's best.

    python benchmarks/cli_startup.py [-n 10]

Targets (wall time, best of n): `trialbox --help` under 0.3 s, `trialbox run --help` under
0.5 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"trialbox --help": 0.3, "trialbox run --help": 0.5}


def trialbox() -> list[str]:
    """The `trialbox` script beside this interpreter (what a user runs), else the module."""
    script = Path(sys.executable).parent / "trialbox"
    return [str(script)] if script.exists() else [sys.executable, "-m", "orchestrator.cli"]


def once(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, check=True, timeout=60)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10, help="runs of each row (default: 10)")
    args = parser.parse_args()
    rows = {
        "floor: python3 -c pass": [sys.executable, "-c", "pass"],
        "import orchestrator": [sys.executable, "-c", "import orchestrator"],
        "from orchestrator import *": [sys.executable, "-c", "from orchestrator import *"],
        "trialbox --help": [*trialbox(), "--help"],
        "trialbox run --help": [*trialbox(), "run", "--help"],
    }
    for argv in rows.values():  # warm the file cache and the bytecode
        once(argv)
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.n):
        for name, argv in rows.items():
            times[name].append(once(argv))
    floor = min(times["floor: python3 -c pass"])
    print(f"{args.n} runs per row, wall time in seconds\n")
    print(f"{'':30} {'best':>6} {'median':>7} {'worst':>6} {'best - floor':>13}")
    for name, values in times.items():
        best = min(values)
        print(
            f"{name:30} {best:6.3f} {statistics.median(values):7.3f} {max(values):6.3f} "
            f"{best - floor:+13.3f}"
        )
    print()
    for name, target in TARGETS.items():
        best = min(times[name])
        verdict = "met" if best < target else "MISSED"
        print(f"{name}: best {best:.3f} s (target < {target} s: {verdict})")


if __name__ == "__main__":
    main()

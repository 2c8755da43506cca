"""Run one benchmark on two commits in one run, interleaved: before, after, before, after.

A refactor should leave the figures where they were, and this machine is shared
and noisy, so the two commits are measured side by side rather than on
different days. Each commit is checked out into a temporary git worktree that
borrows this checkout's ``.venv`` and ``.cache`` (the jar sets); the benchmark
runs there with ``PYTHONPATH`` set to the worktree, so it imports that commit's
code, not the editable install's. Every run's full output is kept in the work
directory, and each run's closing report (from its first table of figures
on) is printed again at the end under the commit's name.

    .venv/bin/python bench/before_after.py --before 5e8eac7 --after HEAD [--rounds 2] \\
        [--script-before bench/upsert_index.py] -- bench/key_index.py --sizes 1000000

A script that was renamed between the two commits is named with
``--script-before``. The worktrees are removed at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str) -> str:
    """One git command in this checkout; its output, stripped."""
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def add_worktree(rev: str, where: Path) -> str:
    """Check ``rev`` out at ``where``, sharing this checkout's virtualenv and jar cache; the full commit id."""
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    git("worktree", "add", "--detach", str(where), commit)
    for shared in (".venv", ".cache"):
        (where / shared).symlink_to(ROOT / shared)
    return commit


def run_bench(tree: Path, script: str, args: list[str], log: Path) -> int:
    """The benchmark in ``tree``, its output to ``log`` and the terminal; its exit status."""
    if not (tree / script).is_file():
        raise SystemExit(f"before_after: --script {script!r} does not exist at {tree.name}; "
                         "name the old path with --script-before")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, script, *args], cwd=tree, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            print(f"  | {line}", end="", flush=True)
        return proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit before the change")
    parser.add_argument("--after", default="HEAD", help="the commit after it (default: HEAD)")
    parser.add_argument("--rounds", type=int, default=2, help="before/after pairs, interleaved")
    parser.add_argument("--script-before", help="the benchmark's path at --before, if it was renamed")
    parser.add_argument("script", help="the benchmark, a path inside the repository")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's own arguments, after --")
    args = parser.parse_args()
    bench_args = [a for a in args.args if a != "--"] if args.args[:1] == ["--"] else args.args
    work = Path(tempfile.mkdtemp(prefix="floe-before-after-"))
    sides = {"before": (args.before, args.script_before or args.script), "after": (args.after, args.script)}
    trees, commits = {}, {}
    try:
        for side, (rev, _) in sides.items():
            trees[side] = work / side
            commits[side] = add_worktree(rev, trees[side])
        logs: list[tuple[str, Path, int]] = []
        for round_ in range(1, args.rounds + 1):
            for side, (_, script) in sides.items():
                print(f"round {round_}, {side} ({commits[side][:10]}): {script} {' '.join(bench_args)}", flush=True)
                log = work / f"{side}-{round_}.log"
                logs.append((f"{side} ({commits[side][:10]}), round {round_}", log,
                             run_bench(trees[side], script, bench_args, log)))
        print(f"\nreports, in the order they ran (full logs in {work}):")
        for label, log, status in logs:
            print(f"\n== {label}: exit {status}")
            print(report_of(log.read_text()))
    finally:
        for tree in trees.values():
            git("worktree", "remove", "--force", str(tree))


def report_of(output: str) -> str:
    """The benchmark's closing report: its output from the first line that begins a table of figures."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(("path ", "per batch:"))]
    return "\n".join(lines[starts[0]:] if starts else lines[-30:])


if __name__ == "__main__":
    main()

"""Where a whole test run's wall time goes: each test process's timeline, by file.

Record a run, then read it:

    COURSEKIT_TEST_TIMELINE=/tmp/timeline.tsv ./scripts/test
    .venv/bin/python benchmarks/suite_timeline.py /tmp/timeline.tsv

Each test process appends a line per test (conftest.py): process, start, end, CPU seconds of
the process and of the children it waited for, test id. Printed: each process's busy time and
when it finished (an unbalanced end leaves a core idle), then the files by wall time, with the
share of a core their tests kept busy (low: the test waits, on a subprocess it does not reap
before the test ends, a sleep, or a server).
"""

from __future__ import annotations

import argparse
from collections import defaultdict


def read(path: str) -> list[tuple[str, float, float, float, str]]:
    rows = []
    with open(path) as lines:
        for line in lines:
            worker, start, end, cpu, nodeid = line.rstrip("\n").split("\t", 4)
            rows.append((worker, float(start), float(end), float(cpu), nodeid))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("timeline")
    parser.add_argument("--files", type=int, default=30, help="how many files to list")
    args = parser.parse_args()
    rows = read(args.timeline)
    if not rows:
        raise SystemExit(f"{args.timeline} holds no tests: was the run recorded?")
    begin = min(r[1] for r in rows)
    end = max(r[2] for r in rows)
    print(f"{len(rows)} tests, {end - begin:.0f} s from the first test's start to the last's end")
    by_worker: dict[str, list] = defaultdict(list)
    for row in rows:
        by_worker[row[0]].append(row)
    print("process   busy s   CPU s   first start   last end   (s from the run's first test)")
    for worker, own in sorted(by_worker.items()):
        busy = sum(r[2] - r[1] for r in own)
        cpu = sum(r[3] for r in own)
        first = min(r[1] for r in own) - begin
        last = max(r[2] for r in own) - begin
        print(f"{worker:8s} {busy:7.0f} {cpu:7.0f} {first:12.0f} {last:10.0f}")
    by_file: dict[str, list] = defaultdict(list)
    for row in rows:
        by_file[row[4].split("::")[0]].append(row)
    print(f"\nfiles by wall time (top {args.files}):")
    print("   wall s   CPU s  CPU/wall  tests  process  span (s from the start)  file")
    ranked = sorted(by_file.items(), key=lambda kv: -sum(r[2] - r[1] for r in kv[1]))
    for name, own in ranked[: args.files]:
        wall = sum(r[2] - r[1] for r in own)
        cpu = sum(r[3] for r in own)
        workers = ",".join(sorted({r[0] for r in own}))
        span = f"{min(r[1] for r in own) - begin:5.0f}-{max(r[2] for r in own) - begin:5.0f}"
        print(
            f"{wall:8.1f} {cpu:7.1f} {cpu / wall if wall else 0:8.2f} {len(own):6d}  "
            f"{workers:7s}  {span:23s}  {name}"
        )
    print("\ntests with the most wall time not spent on CPU (waits):")
    waits = sorted(rows, key=lambda r: -((r[2] - r[1]) - r[3]))[:15]
    for _worker, start, stop, cpu, nodeid in waits:
        print(f"{stop - start:7.1f} s wall {cpu:6.1f} s CPU  {nodeid[:110]}")


if __name__ == "__main__":
    main()

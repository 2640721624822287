"""How long ``coursekit site`` takes: running every exercise notebook into an empty cache,
then a rebuild from that cache (the issue's budget: under 2 minutes on 2 cores from a cache).

Run: .venv/bin/python benchmarks/site_build.py [--cache DIR] [--skip-run]
With --cache pointing at a filled cache and --skip-run, only the rebuild is timed. The first
run executes nine notebooks (minutes); nothing here is part of the test suite.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from coursekit.authoring.publication import from_course
from coursekit.site import build_site

REPO = Path(__file__).resolve().parents[1]


def timed(label: str, **options) -> None:
    start_wall = time.perf_counter()
    start_cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    report = build_site(REPO, publication=from_course(), progress=lambda text: None, **options)
    wall = time.perf_counter() - start_wall
    cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime - start_cpu
    kernels = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - children
    print(
        f"{label}: {wall:.1f} s wall, {cpu:.1f} s CPU here + {kernels:.1f} s in kernels; "
        f"{len(report.pages)} pages, ran {len(report.executed)} notebooks "
        f"({len(report.failed)} stopped early), {report.missing_outputs} demonstrations "
        "without output"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, help="output cache (default: a new, empty one)")
    parser.add_argument("--skip-run", action="store_true", help="time the rebuild only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        cache = args.cache or Path(scratch) / "cache"
        if not args.skip_run:
            timed("run every notebook", out=Path(scratch) / "first", cache_dir=cache)
        timed("rebuild from the cache", out=Path(scratch) / "second", cache_dir=cache,
              run_notebooks=False)  # fmt: skip


if __name__ == "__main__":
    main()

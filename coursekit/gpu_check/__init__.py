"""``scripts/gpu-check``: every CUDA path of the course in one command, and a short report.

On one GPU it runs, within a time budget (450 s by default, leaving room to stay under 8
minutes in all; not yet timed on a GPU):

1. every solution notebook under papermill with ``-p device cuda`` (module 7 with
   ``-p model config:gpt2``: GPT-2's size from its configuration, random weights, since a
   GPU machine may not reach the Hugging Face Hub);
2. the CUDA allocator's peaks against the course's memory model (:mod:`.measures`);
3. the tuner's micro-batch against trying every size, with real out-of-memory errors;
4. the course's loop against the HF Trainer in tokens per second, on the same settings;

and writes a markdown report (:mod:`.report`). Without a CUDA GPU it says so in one line and
exits at once with :data:`NO_GPU` (77, the "skipped" status of automake's test harness), so
a script can tell "nothing was checked" from "checked and passed" (0) and "a check failed"
(1). ``dry_run=True`` runs the same code on the CPU with tiny settings instead: it checks
gpu-check itself, and its report says that no figure in it comes from a GPU.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from coursekit.gpu_check import notebooks as runner
from coursekit.gpu_check.report import FAILED, NOT_RUN, PASSED, Check, failed, markdown, write

NO_GPU = 77
FAILED_EXIT = 1
DEFAULT_REPORT = Path("gpu-check-report.md")
DEFAULT_NOTEBOOKS = Path("runs") / "gpu-check"


def run_checks(
    *,
    report: Path = DEFAULT_REPORT,
    budget_s: float = 450.0,
    dry_run: bool = False,
    modules: list[str] | None = None,
    notebooks_dir: Path = DEFAULT_NOTEBOOKS,
    measure_s: float = 150.0,
    skip_notebooks: bool = False,
) -> int:
    """Run the checks and write the report; the exit status (0, 1 or :data:`NO_GPU`).

    ``budget_s`` bounds the whole run: the notebooks run first and leave ``measure_s`` for
    the measurements; a part that would start after its share is over is reported as not
    run. ``modules`` limits the notebooks to those named.
    """
    import torch  # here, not at the top: `--help` and a bad argument answer at once

    from coursekit.gpu_check import measures
    from coursekit.real_model import language_model

    if not dry_run and not torch.cuda.is_available():
        build = "a CPU build of torch" if torch.version.cuda is None else "no CUDA GPU visible"
        print(
            f"gpu-check: no CUDA GPU here ({build}, torch {torch.__version__}); nothing was "
            f"run and no report written. Run it on a GPU machine, or with --dry-run to check "
            f"the script on this CPU (exit status {NO_GPU})."
        )
        return NO_GPU
    names = runner.modules(modules)  # a bad name stops here, before anything runs
    settings = measures.DRY_RUN if dry_run else measures.ON_GPU
    start = time.monotonic()
    end = start + budget_s
    checks: list[Check] = []

    if skip_notebooks:
        checks.append(Check("Solution notebooks", NOT_RUN, "--skip-notebooks"))
    else:
        checks.append(_notebooks(names, settings, notebooks_dir, end - measure_s))
    device = torch.device(settings.device)
    lm = language_model.load(settings.model, device, seed=0, max_positions=settings.seq_len)
    card_gb = (
        torch.cuda.get_device_properties(device).total_memory / 2**30
        if device.type == "cuda"
        else 0
    )
    for title, part in (
        (measures.MEMORY, lambda: measures.memory_model(lm, settings, end)),
        (measures.TUNER, lambda: measures.tuner(lm, settings, end, card_gb)),
        (measures.THROUGHPUT, lambda: measures.throughput(lm, settings, end)),
    ):
        part_start = time.monotonic()
        try:
            checks.append(part())
        except Exception as error:  # one part's failure is reported, the others still run
            why = f"{type(error).__name__}: {error}"[:300]
            checks.append(Check(title, FAILED, why, seconds=time.monotonic() - part_start))
    text = markdown(checks, machine(device, lm), dry_run, time.monotonic() - start)
    where = write(report, text)
    verdicts = ", ".join(f"{c.title}: {c.verdict}" for c in checks)
    print(f"gpu-check: {verdicts}. Report: {where}")
    return FAILED_EXIT if failed(checks) else 0


def _notebooks(names: list[str], settings, out_dir: Path, deadline: float) -> Check:
    """Each solution in turn, until ``deadline``; the ones left are reported as not run."""
    start = time.monotonic()
    rows, bad = [], 0
    for name in names:
        left = deadline - time.monotonic()
        if left < 20:
            rows.append((name, "not run: out of time", "", ""))
            bad += 1
            continue
        parameters = dict(settings.notebook_parameters)
        if name == "07_real_model":
            parameters.update(settings.module7_parameters)
        run = runner.run_one(name, Path(out_dir), parameters, left)
        bad += not run.ok
        rows.append(
            (
                name,
                "passed" if run.ok else "FAILED",
                f"{run.seconds:.0f}",
                run.error or "; ".join(run.skipped) or "",
            )
        )
    flags = " ".join(f"-p {k} {v}" for k, v in settings.notebook_parameters.items())
    more = " ".join(f"-p {k} {v}" for k, v in settings.module7_parameters.items())
    summary = (
        f"{len(names) - bad} of {len(names)} solutions ran with {flags} (module 7 also "
        f"{more}); the executed copies are in {out_dir}/"
    )
    notes = [
        "The last column: the first error, or the cells that printed that they skipped "
        "a part (a path that did not run here)."
    ]
    return Check(
        "Solution notebooks",
        FAILED if bad else PASSED,
        summary,
        ("module", "result", "seconds", "error, or parts skipped"),
        rows,
        notes,
        time.monotonic() - start,
    )


def machine(device, lm) -> list[str]:
    """The lines that say where the report's figures come from."""
    import torch

    from coursekit.mixed_precision import has_native_bf16

    lines = [f"run at {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.node() or '?'}"]
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        lines.append(
            f"GPU: {props.name}, compute capability {props.major}.{props.minor}, "
            f"{props.total_memory / 2**30:.1f} GiB; native bf16: "
            f"{'yes' if has_native_bf16(device) else 'no (fp16 + GradScaler)'}"
        )
    else:
        lines.append(f"device: CPU ({platform.processor() or platform.machine()}), no GPU")
    versions = []
    for package in ("torch", "transformers", "accelerate", "lightning", "peft"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} not installed")
    cuda = f", CUDA {torch.version.cuda}" if torch.version.cuda else ""
    lines.append(", ".join(versions) + cuda)
    lines.append(f"model of the measurements: {lm}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """The command line: each option maps to one keyword of :func:`run_checks`."""
    defaults = run_checks.__kwdefaults__
    parser = argparse.ArgumentParser(
        prog="scripts/gpu-check",
        description="Run every CUDA path of the course on this GPU and write a short report. "
        f"Exit status: 0 every check passed, 1 a check failed, {NO_GPU} no GPU here (nothing "
        "run), 2 bad arguments.",
    )
    parser.add_argument(
        "report",
        nargs="?",
        type=Path,
        default=defaults["report"],
        help=f"where to write the markdown report (default {DEFAULT_REPORT})",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=defaults["budget_s"],
        help="seconds for the whole run (default %(default)s)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="on the CPU with tiny settings: checks the script, not a GPU",
    )
    parser.add_argument(
        "--modules", nargs="+", metavar="NAME", help="only these notebooks (e.g. 07_real_model)"
    )
    parser.add_argument(
        "--notebooks-dir",
        type=Path,
        default=defaults["notebooks_dir"],
        help="where the executed notebooks go (default %(default)s)",
    )
    parser.add_argument(
        "--measure-s",
        type=float,
        default=defaults["measure_s"],
        help="seconds kept for the measurements after the notebooks",
    )
    parser.add_argument("--skip-notebooks", action="store_true", help="only the measurements")
    args = parser.parse_args(argv)
    try:
        runner.modules(args.modules)
    except ValueError as error:
        parser.error(str(error))  # exits with 2
    if args.budget_s <= args.measure_s or args.measure_s < 0:
        parser.error("--budget-s must be more than --measure-s, and both at least 0")
    return run_checks(
        report=args.report,
        budget_s=args.budget_s,
        dry_run=args.dry_run,
        modules=args.modules,
        notebooks_dir=args.notebooks_dir,
        measure_s=args.measure_s,
        skip_notebooks=args.skip_notebooks,
    )


if __name__ == "__main__":
    sys.exit(main())

"""``scripts/colab-check``: the course in an environment at Colab's package versions.

Colab gives students its own Python, torch, transformers, ipywidgets 7 and IPython 7, which
our development environment does not have. This check builds that environment (the pins and
their source are in :mod:`.pins`), installs coursekit into it by running the notebooks' own
set-up cell (:mod:`.install`), and runs every solution and every untouched exercise in a
kernel on it, offline, with the papermill runner of ``scripts/gpu-check``
(:mod:`coursekit.gpu_check.notebooks`). It prints one line per notebook and exits 1 if
anything failed. It downloads a torch, so it is not part of the test suite: run it before a
term starts (docs/instructor-guide.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from coursekit.colab_check import environment, interpreter, pins, torch_builds
from coursekit.gpu_check import notebooks as runner

OK, FAILED_EXIT, BAD_ARGUMENTS = 0, 1, 2
FOLDERS = ("solutions", "exercises")
#: Set in every kernel: offline, as in the tests (no run of the course downloads anything:
#: module 7 builds its tiny model from a configuration), and Colab's marker, so code that
#: asks "on Colab?" answers as it would there.
KERNEL_ENVIRONMENT = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "COLAB_RELEASE_TAG": "colab-check",
}

#: Not passed on to the kernels: the checkout on the path, this venv's Matplotlib backend, and
#: strict checks (run_one sets them for solutions only).
NOT_FOR_KERNELS = ("PYTHONPATH", "PYTHONHOME", "MPLBACKEND", "COURSEKIT_STRICT_CHECKS")


@dataclass(frozen=True)
class Planned:
    """One notebook to run: solutions strictly (every check passes), exercises as handed out."""

    folder: str
    module: str

    @property
    def path(self) -> Path:
        return runner.REPO / self.folder / f"{self.module}.ipynb"

    @property
    def label(self) -> str:
        return f"{self.folder}/{self.module}.ipynb"


def plan(modules: list[str] | None = None, folders: tuple[str, ...] = FOLDERS) -> list[Planned]:
    """What a run executes: every solution, then every exercise, in the course's order."""
    names = runner.modules(modules)
    return [Planned(folder, name) for folder in folders for name in names]


def line(label: str, ok: bool, seconds: float, error: str = "") -> str:
    """One notebook's line: name, ok or failed, seconds, the first error."""
    text = f"{label:<38} {'ok' if ok else 'FAILED':<6} {seconds:6.0f} s"
    return f"{text}  {error}" if error else text


def run_check(
    *,
    modules: list[str] | None = None,
    folders: tuple[str, ...] = FOLDERS,
    python: Path | None = None,
    torch_build: str = "auto",
    cache: Path | None = None,
    rebuild: bool = False,
    dry_run: bool = False,
    outputs: Path | None = None,
    timeout_s: float = 1200.0,
) -> int:
    """Build (or reuse) the Colab environment, install coursekit, run the notebooks.

    Returns 0 when every notebook ran, 1 when the environment could not be built, the
    set-up cell failed or changed one of Colab's packages, or a notebook failed. ``dry_run``
    prints the plan and stops: nothing is built, downloaded or run.
    """
    todo = plan(modules, folders)  # a bad module name stops here, before anything else
    used = interpreter.find(pins.PYTHON, python)
    build = torch_builds.choose(torch_build, pins.torch_version())
    root = cache or environment.cache_root()
    env = environment.ColabEnvironment(root / environment.key(used, build))
    say(f"colab-check: {pins.SNAPSHOT}")
    say(interpreter.describe(used, pins.PYTHON))
    say(f"torch: {build.requirement} ({build.why}; Colab's is {pins.colab_torch()})")
    state = "built before: reused" if env.ready and not rebuild else "new: a torch download"
    say(f"Environment: {env.folder} ({state})")
    outputs = outputs or env.folder / "runs"
    if dry_run:
        say(f"Set-up cell: {_setup_notebook(todo)}'s, installing a wheel of {runner.REPO}")
        say(f"Notebooks ({len(todo)}), outputs in {outputs}:")
        for item in todo:
            say(f"  {item.label}")
        say("Dry run: nothing was built or run.")
        return OK

    try:
        if rebuild or not env.ready:
            environment.build(used, build, env.folder, log=say)
        say(environment.torch_summary(env))
        from coursekit.colab_check import install  # imports the authoring code: only here

        outcome = install.run_setup_cell(env, _setup_notebook(todo), runner.REPO)
    except (environment.BuildError, ValueError, RuntimeError, OSError) as problem:
        say(f"colab-check: {problem}")
        return FAILED_EXIT
    install_failed = _report_install(outcome, env)
    os.environ.update(KERNEL_ENVIRONMENT)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # shared 2-core machines; results unchanged
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(env.kernels), *filter(None, [os.environ.get("JUPYTER_PATH")])]
    )
    for leak in NOT_FOR_KERNELS:
        os.environ.pop(leak, None)
    if not outcome.coursekit:
        return FAILED_EXIT
    start, failed = time.monotonic(), 0
    for item in todo:
        done = runner.run_one(
            item.module,
            outputs / item.folder,
            {},
            timeout_s,
            folder=item.folder,
            kernel=environment.KERNEL_NAME,
            strict=item.folder == "solutions",
        )
        failed += not done.ok
        say(line(item.label, done.ok, done.seconds, done.error))
    verdict = f"{failed} failed" if failed else "every one ran"
    say(f"{len(todo)} notebooks in {time.monotonic() - start:.0f} s: {verdict}; run in {outputs}")
    if install_failed:
        say("colab-check: FAILED: the set-up cell changed Colab's packages (above)")
    return FAILED_EXIT if failed or install_failed else OK


def _setup_notebook(todo: list[Planned]) -> Path:
    """The notebook whose set-up cell installs coursekit: an exercise, as students open."""
    return runner.REPO / "exercises" / f"{todo[0].module}.ipynb"


def _report_install(outcome, env: environment.ColabEnvironment) -> int:
    """Print what the set-up cell did; the number of failures (0 or 1)."""
    where = subprocess.run(
        [str(env.python), "-c", "import coursekit; print(coursekit.__file__)"],
        capture_output=True,
        text=True,
        cwd=runner.REPO / "solutions",
        env=environment.clean_environment(),
    ).stdout.strip()
    if outcome.error or not outcome.coursekit:
        say(f"Set-up cell: FAILED: {outcome.error or 'coursekit is not installed after it'}")
        return 1
    say(f"Set-up cell: installed coursekit {outcome.coursekit} ({where or 'not importable'})")
    if outcome.added:
        say(f"  it also installed (Colab would too): {', '.join(outcome.added)}")
    if outcome.changed:
        say(f"  FAILED: it changed Colab's own packages: {', '.join(outcome.changed)}")
        return 1
    say("  it kept every one of Colab's packages")
    return 0


def say(text: str) -> None:
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    """The command line: options map onto :func:`run_check`'s keywords and defaults."""
    defaults = run_check.__kwdefaults__
    parser = argparse.ArgumentParser(
        prog="scripts/colab-check",
        description=(
            "Run every solution and untouched exercise in an environment at the package "
            f"versions of Colab's published runtime ({pins.SNAPSHOT}; Python {pins.PYTHON}), "
            "with coursekit installed by the notebooks' own set-up cell. Prints one line per "
            "notebook; exit status 0 all ran, 1 something failed, 2 bad arguments. The "
            "environment is built once under ~/.cache/coursekit/colab-check/ and reused."
        ),
    )
    parser.add_argument("--only", nargs="+", metavar="MODULE", help="only these modules")
    parser.add_argument(
        "--solutions-only", action="store_true", help="skip the untouched exercises"
    )
    parser.add_argument("--python", type=Path, help="the interpreter to build with")
    parser.add_argument(
        "--torch-build",
        choices=("auto", *torch_builds.BUILDS),
        default=defaults["torch_build"],
        help="auto (default): Colab's cu128 build with an NVIDIA GPU, else the CPU build; "
        "PyPI's build where PyTorch's index cannot be reached",
    )
    parser.add_argument("--cache", type=Path, help="where environments are kept")
    parser.add_argument("--rebuild", action="store_true", help="build the environment anew")
    parser.add_argument("--outputs", type=Path, help="where the executed notebooks go")
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=defaults["timeout_s"],
        help="seconds one notebook may take (default %(default).0f)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan; build, download and run nothing"
    )
    options = parser.parse_args(argv)
    try:
        return run_check(
            modules=options.only,
            folders=("solutions",) if options.solutions_only else FOLDERS,
            python=options.python,
            torch_build=options.torch_build,
            cache=options.cache,
            rebuild=options.rebuild,
            dry_run=options.dry_run,
            outputs=options.outputs,
            timeout_s=options.timeout_s,
        )
    except ValueError as problem:  # a bad module name, no usable Python, a bad --python
        print(f"colab-check: {problem}", file=sys.stderr)
        return BAD_ARGUMENTS

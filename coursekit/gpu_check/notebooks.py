"""Every solution notebook under papermill with ``-p device cuda``, one after the other.

Each runs in a process group of its own (papermill and its kernel), so a notebook that hangs
is stopped with everything it started when its time is up. ``COURSEKIT_STRICT_CHECKS=1``
turns a check that does not pass into an error, as in CI, and ``HF_HUB_OFFLINE=1`` keeps
module 7 from waiting on a Hub it cannot reach (it builds its model from a configuration).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from coursekit.course import MODULES

REPO = Path(__file__).resolve().parents[2]


@dataclass
class NotebookRun:
    module: str
    ok: bool
    seconds: float
    error: str = ""  # "cell id: Name: message" of the first error, or why it did not run
    skipped: tuple[str, ...] = ()  # cells that printed that they skipped their work


def command(
    module: str,
    out: Path,
    parameters: dict[str, object],
    cell_timeout_s: int,
    folder: str = "solutions",
    kernel: str = "python3",
) -> list[str]:
    """The papermill command line for one notebook of ``folder`` (scripts/colab-check runs
    exercises/ too), in the kernel named ``kernel``."""
    source = REPO / folder / f"{module}.ipynb"
    cmd = [sys.executable, "-m", "papermill", str(source), str(out), "-k", kernel]
    cmd += ["--cwd", str(source.parent), "--no-progress-bar"]
    cmd += ["--execution-timeout", str(cell_timeout_s)]
    for name, value in parameters.items():
        cmd += ["-p", name, str(value)]
    return cmd


def first_error(notebook: Path) -> str:
    """``cell id: Name: message`` of the first cell with an error output, or ""."""
    for cell in _cells(notebook):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                lines = [line.strip() for line in str(output.get("evalue", "")).splitlines()]
                lines = [line for line in lines if line]
                message = lines[-1] if lines else ""
                return f"{cell.get('id', '?')}: {output.get('ename')}: {message}"[:300]
    return ""


def skipped_cells(notebook: Path) -> tuple[str, ...]:
    """Cells whose printed output says they skipped a part (a framework not installed, a GPU
    cell on a CPU, bf16 on a GPU that only emulates it): a CUDA path that did not run."""
    found = []
    for cell in _cells(notebook):
        text = "".join(
            "".join(o["text"]) if isinstance(o.get("text"), list) else o.get("text", "")
            for o in cell.get("outputs", [])
            if o.get("output_type") == "stream"
        )
        for line in text.splitlines():
            if re.search(r"^Skipped:|\bskipped\b|\bskipping\b", line, re.IGNORECASE):
                found.append(f"{cell.get('id', '?')}: {line.strip()[:160]}")
    return tuple(found)


def _cells(notebook: Path) -> list[dict]:
    try:
        return json.loads(Path(notebook).read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return []


def run_one(
    module: str,
    out_dir: Path,
    parameters: dict[str, object],
    timeout_s: float,
    *,
    folder: str = "solutions",
    kernel: str = "python3",
    strict: bool = True,
) -> NotebookRun:
    """Run one notebook (a solution by default); never raises for the notebook's own failures.

    ``strict``: every ``check(...)`` must pass (solutions); False for untouched exercises,
    whose checks say "not attempted".
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    out, log = out_dir / f"{module}.ipynb", out_dir / f"{module}.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if strict:
        env["COURSEKIT_STRICT_CHECKS"] = "1"
    else:
        env.pop("COURSEKIT_STRICT_CHECKS", None)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    start = time.monotonic()
    with log.open("w") as log_file:
        process = subprocess.Popen(
            command(module, out, parameters, max(1, int(timeout_s)), folder, kernel),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: papermill, the kernel, workers
        )
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = None
    seconds = time.monotonic() - start
    error = first_error(out)
    if code is None:
        error = f"stopped after {timeout_s:.0f} s" + (f" ({error})" if error else "")
    elif code != 0 and not error:
        tail = log.read_text(errors="replace").strip().splitlines()
        error = tail[-1][:300] if tail else f"papermill exited with {code}"
    return NotebookRun(module, code == 0 and not error, seconds, error, skipped_cells(out))


def modules(only: list[str] | None = None) -> list[str]:
    """The course's modules in order (``coursekit.course.MODULES``), or the ``only`` ones;
    a name that is not a module is a ValueError naming the real ones."""
    names = [module.name for module in MODULES]
    if not only:
        return names
    unknown = [name for name in only if name not in names]
    if unknown:
        raise ValueError(f"no module {', '.join(unknown)}; the modules are {', '.join(names)}")
    return [name for name in names if name in only]

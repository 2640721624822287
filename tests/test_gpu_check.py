"""scripts/gpu-check's parts that run without a GPU: the no-GPU exit, its arguments, the
notebook runner's reading of a run (first error, skipped parts, a run that overruns), the
exhaustive search it holds the tuner to, and the report. The GPU path itself runs only on a
GPU machine; ``scripts/gpu-check --dry-run`` runs the same code on a CPU (seconds, not here).
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
import torch

from coursekit import gpu_check
from coursekit.gpu_check import measures
from coursekit.gpu_check import notebooks as runner
from coursekit.gpu_check.report import FAILED, MEASURED, NOT_RUN, PASSED, Check, markdown
from coursekit.real_model.simulated_device import GIB, SimulatedDevice

MIB = 2**20


def test_without_a_gpu_it_says_so_and_exits_at_once_writing_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    report, runs = tmp_path / "report.md", tmp_path / "runs"
    start = time.process_time()
    assert gpu_check.main([str(report), "--notebooks-dir", str(runs)]) == gpu_check.NO_GPU == 77
    assert time.process_time() - start < 5  # nothing was run (a generous backstop)
    said = capsys.readouterr().out
    assert said.startswith("gpu-check: no CUDA GPU here") and "--dry-run" in said
    assert not report.exists() and not runs.exists()


@pytest.mark.parametrize(
    ("arguments", "told"),
    [
        (["--modules", "99_nope"], "no module 99_nope; the modules are 00_welcome"),
        (["--budget-s", "60", "--measure-s", "90"], "--budget-s must be more than --measure-s"),
    ],
)
def test_bad_arguments_are_named_before_anything_runs(monkeypatch, capsys, arguments, told):
    def ran(**_):
        pytest.fail("it ran")

    ran.__kwdefaults__ = gpu_check.run_checks.__kwdefaults__  # the defaults the CLI reads
    monkeypatch.setattr(gpu_check, "run_checks", ran)
    with pytest.raises(SystemExit) as stopped:
        gpu_check.main(arguments)
    assert stopped.value.code == 2 and told in capsys.readouterr().err


def test_every_module_is_run_in_the_course_s_order_and_module_7_on_gpt2_s_size():
    from coursekit.course import MODULES

    assert runner.modules() == [m.name for m in MODULES]
    assert runner.modules(["07_real_model", "00_welcome"]) == ["00_welcome", "07_real_model"]
    assert measures.ON_GPU.notebook_parameters == {"device": "cuda"}
    assert measures.ON_GPU.module7_parameters["model"] == "config:gpt2"
    cmd = runner.command("07_real_model", runner.REPO / "out.ipynb", {"device": "cuda"}, 60)
    assert cmd[:3] == [sys.executable, "-m", "papermill"] and os.path.exists(cmd[3])
    assert cmd[-3:] == ["-p", "device", "cuda"] and "--execution-timeout" in cmd


def _notebook(path, cells):
    path.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    return path


def test_a_run_s_first_error_and_its_skipped_parts_are_read(tmp_path):
    stream = lambda text: {"output_type": "stream", "name": "stdout", "text": text}  # noqa: E731
    error = {"output_type": "error", "ename": "OutOfMemoryError", "evalue": "a\nCUDA out"}
    run = _notebook(
        tmp_path / "run.ipynb",
        [
            {
                "id": "m07-05",
                "outputs": [stream(["bf16: skipped (this GPU only emulates", " it)\n"])],
            },
            {"id": "m07-11", "outputs": [stream("Skipped: PyTorch Lightning needs lightning\n")]},
            {"id": "m07-20", "outputs": [error]},
            {"id": "m07-24", "outputs": [{**error, "ename": "Later"}]},
        ],
    )
    assert runner.first_error(run) == "m07-20: OutOfMemoryError: CUDA out"
    assert runner.skipped_cells(run) == (
        "m07-05: bf16: skipped (this GPU only emulates it)",
        "m07-11: Skipped: PyTorch Lightning needs lightning",
    )
    assert runner.first_error(tmp_path / "absent.ipynb") == ""


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_a_notebook_that_overruns_is_stopped_with_what_it_started(monkeypatch, tmp_path):
    """papermill starts a kernel, which may start workers: all of them are stopped."""
    child = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(child)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    monkeypatch.setattr(runner, "command", lambda *a: [sys.executable, "-c", script])
    # 5 s: time for the kernel stand-in to start its child even on a loaded machine
    run = runner.run_one("00_welcome", tmp_path, {}, timeout_s=5)
    assert not run.ok and run.error.startswith("stopped after 5 s")
    pid = int(child.read_text())
    deadline = time.monotonic() + 60  # a backstop for a loaded machine, not a speed limit
    while _running(pid):  # the kill is sent; the child may take a moment to end
        if time.monotonic() > deadline:
            pytest.fail("the notebook's child process outlived the timeout")
        time.sleep(0.1)


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs: a zombie (ended, waiting for a parent that may never reap
    it, such as a test process made a subreaper by a grading test) does not."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def test_trying_every_size_stops_at_the_first_that_does_not_fit_and_frees_it():
    card = SimulatedDevice(
        8 * GIB, GIB, 150 * MIB, held_fraction=0.5, max_calls=200
    )  # out above 47
    frees = []

    def free():
        frees.append(card.held_bytes)
        card.free_memory()

    limit = int(8 * GIB * 0.9)
    largest, tries = measures.largest_by_trying_every_size(card.try_step, free, limit, 256, 1e18)
    assert (
        largest == max(b for b in range(1, 48) if card.needs(b) <= limit) and tries == largest + 1
    )
    assert not frees  # the limit came first: no out-of-memory error to free
    largest, tries = measures.largest_by_trying_every_size(card.try_step, free, 2**62, 256, 1e18)
    assert (largest, tries) == (47, 48) and frees and card.held_bytes == 0
    assert measures.largest_by_trying_every_size(card.try_step, free, limit, 256, 0) == (None, 0)


def test_the_report_gives_verdicts_first_and_says_what_is_not_a_gpu_figure():
    checks = [
        Check("Solution notebooks", PASSED, "8 of 8", ("module", "error"), [("07", "a | b")]),
        Check("Memory", MEASURED, "estimate / peak 0.9 to 1.1", notes=["per sample 80 MiB"]),
        Check("Tuner", FAILED, "disagree"),
        Check("Throughput", NOT_RUN, "out of time"),
    ]
    text = markdown(checks, ["GPU: H100"], dry_run=True, seconds=12.3)
    assert text.startswith("# gpu-check report (CPU dry run)\n")
    assert "No figure below was measured on a GPU" in text
    verdicts = text.index("## Verdicts")
    assert verdicts < text.index("## 1. Solution notebooks") < text.index("## 4. Throughput")
    assert "| Tuner | FAILED | 0 | disagree |" in text and "a \\| b" in text
    assert "- per sample 80 MiB" in text and "- whole run: 12 s" in text
    assert "dry run" not in markdown(checks, ["GPU: H100"], dry_run=False, seconds=1)
    with pytest.raises(ValueError, match="verdict must be one of"):
        Check("x", "ok", "")

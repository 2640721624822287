"""``coursekit doctor``: what this machine offers the course, and what to do about gaps."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import shutil
import sys
from dataclasses import dataclass, field

from coursekit.colab import in_colab
from coursekit.units import format_bytes

MIN_PYTHON = (3, 10)


@dataclass
class Finding:
    """One line of the report: a fact, and advice when something is missing."""

    label: str
    value: str
    ok: bool = True
    advice: str = ""


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    def render(self) -> str:
        width = max(len(f.label) for f in self.findings)
        lines = []
        for f in self.findings:
            mark = "ok " if f.ok else "!! "
            lines.append(f"{mark}{f.label.ljust(width)}  {f.value}")
            if f.advice:
                lines.append(f"   {' ' * width}  -> {f.advice}")
        verdict = "Ready for the course." if self.ok else "Fix the lines marked !! first."
        return "\n".join([*lines, "", verdict])


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def diagnose() -> Report:
    """Collect the report; never raises, so it can always be shown to a student."""
    report = Report()
    add = report.findings.append

    py_ok = sys.version_info[:2] >= MIN_PYTHON
    add(
        Finding(
            "Python",
            platform.python_version(),
            py_ok,
            "" if py_ok else f"Install Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer.",
        )
    )
    if importlib.util.find_spec("torch") is None:
        add(Finding("torch", "missing", False, "pip install torch  (then run this again)"))
    else:
        _torch_findings(add)

    widgets = _version("ipywidgets")
    add(
        Finding(
            "ipywidgets",
            widgets or "missing",
            widgets is not None,
            "" if widgets else "pip install ipywidgets  (the interactive views need it)",
        )
    )
    add(Finding("Colab", "running on Colab" if in_colab() else "not on Colab"))
    lab = _version("jupyterlab")
    if not in_colab():
        add(
            Finding(
                "jupyterlab",
                lab or "missing",
                True,
                "" if lab else "Only needed for `coursekit start`: pip install 'coursekit[lab]'.",
            )
        )
    return report


#: Where an NVIDIA driver shows itself, whatever torch can do: its command, and the files
#: the kernel module makes (a container may have the device files but not the command).
NVIDIA_DRIVER_FILES = ("/proc/driver/nvidia/version", "/dev/nvidia0")


def nvidia_gpu_signs() -> list[str]:
    """What on this machine says it has an NVIDIA GPU (empty where nothing does)."""
    signs = [f"{path} exists" for path in NVIDIA_DRIVER_FILES if os.path.exists(path)]
    if shutil.which("nvidia-smi"):
        signs.insert(0, "nvidia-smi is installed")
    return signs


def _torch_findings(add) -> None:
    import torch

    from coursekit.environment import gpu_summary, pick_device

    built_with_cuda = torch.version.cuda is not None
    add(
        Finding(
            "torch",
            f"{torch.__version__} (built with CUDA {torch.version.cuda})"
            if built_with_cuda
            else f"{torch.__version__} (built without CUDA)",
        )
    )
    device = pick_device()
    advice = ""
    signs = nvidia_gpu_signs() if device.type == "cpu" else []
    if signs and not built_with_cuda:
        advice = (
            f"This machine has an NVIDIA GPU ({', '.join(signs)}), but this torch "
            f"({torch.__version__}) is built without CUDA, so it cannot use it. To use the GPU, "
            "install a CUDA build of torch (delete .venv and run ./scripts/setup again). "
            "Every exercise also runs on the CPU."
        )
    elif signs:
        advice = (
            f"This machine has an NVIDIA GPU ({', '.join(signs)}) and this torch is built with "
            f"CUDA {torch.version.cuda}, but torch cannot use the GPU "
            "(torch.cuda.is_available() is False): the driver may be older than that CUDA, "
            "or the GPU hidden (CUDA_VISIBLE_DEVICES). Every exercise also runs on the CPU."
        )
    elif device.type == "cpu":
        advice = (
            "No GPU found: every exercise runs on the CPU; GPU cells say when they are skipped. "
            "On Colab, choose Runtime > Change runtime type > GPU to try the CUDA path."
        )
        if not built_with_cuda:
            advice += " (This torch is built without CUDA: on a GPU machine, install a CUDA build.)"
    add(Finding("device", device.type, True, advice))
    gpu = gpu_summary()
    if gpu is not None:
        add(Finding("GPU", f"{gpu['name']}, {format_bytes(gpu['memory_bytes'])}"))

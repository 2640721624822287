"""Which build of Colab's torch release to install, and from where.

Colab runs ``torch==2.11.0+cu128``, a CUDA 12.8 build, on its CPU runtimes too. PyPI's Linux
wheel of the same release is a CUDA build as well (with several GB of ``nvidia-*`` wheels);
PyTorch's CPU index has a ~200 MB wheel of the same code without CUDA. So, with ``auto``:
a machine with an NVIDIA GPU gets Colab's own build (the cu128 index), one without gets the
CPU build, and where that index cannot be reached, PyPI's build, saying so.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from coursekit.commands.doctor import nvidia_gpu_signs

PYTORCH_INDEX = "https://download.pytorch.org/whl/"
#: The builds ``--torch-build`` accepts, besides ``auto``.
BUILDS = ("cpu", "cu128", "pypi")


@dataclass(frozen=True)
class TorchBuild:
    name: str  # "cpu", "cu128" or "pypi"
    requirement: str  # what pip installs, e.g. "torch==2.11.0+cpu"
    extra_index: str | None  # the index it comes from besides PyPI; None: PyPI alone
    why: str  # one line for the run's header

    @property
    def pip_options(self) -> list[str]:
        return ["--extra-index-url", self.extra_index] if self.extra_index else []


def index_reachable(url: str, timeout_s: float = 15.0) -> bool:
    """True when ``url`` answers (any HTTP status below 400) within ``timeout_s``."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout_s):
            return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def choose(
    wanted: str,
    version: str,
    *,
    has_gpu: bool | None = None,
    reachable: Callable[[str], bool] = index_reachable,
) -> TorchBuild:
    """The build to install for ``wanted`` (``auto`` or one of :data:`BUILDS`).

    ``auto`` picks cu128 with an NVIDIA GPU, cpu without, and PyPI's build where PyTorch's
    index does not answer. A build named explicitly is taken as it is (pip then says if its
    index cannot be reached). ``has_gpu`` None: look for an NVIDIA driver on this machine.
    """
    if wanted not in ("auto", *BUILDS):
        raise ValueError(f"no torch build {wanted!r}: choose auto, {', '.join(BUILDS)}")
    if wanted == "pypi":
        return _pypi(version, "asked for with --torch-build pypi")
    if wanted != "auto":
        return _indexed(wanted, version, f"asked for with --torch-build {wanted}")
    gpu = bool(nvidia_gpu_signs()) if has_gpu is None else has_gpu
    name = "cu128" if gpu else "cpu"
    why = (
        "Colab's own CUDA 12.8 build: this machine has an NVIDIA GPU"
        if gpu
        else "the CPU build: this machine has no NVIDIA GPU"
    )
    if reachable(PYTORCH_INDEX + name + "/torch/"):
        return _indexed(name, version, why)
    return _pypi(
        version,
        f"PyTorch's {name} index, {PYTORCH_INDEX}{name}, cannot be reached from here, so "
        "PyPI's build of the same release",
    )


def _indexed(name: str, version: str, why: str) -> TorchBuild:
    return TorchBuild(name, f"torch=={version}+{name}", PYTORCH_INDEX + name, why)


def _pypi(version: str, why: str) -> TorchBuild:
    return TorchBuild("pypi", f"torch=={version}", None, why)

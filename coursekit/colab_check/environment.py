"""The Colab environment on disk: built once per pin list, Python and torch build, then reused.

It lives under the user's cache folder, outside the repository
(``~/.cache/coursekit/colab-check/<key>/``, ``$XDG_CACHE_HOME`` honoured): a virtual
environment at Colab's versions, and ``ready.json``, written last, holding what
``pip freeze`` said once the build was done. A folder without ``ready.json`` is a build that
stopped half-way, and is built again from nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from coursekit.colab_check import pins
from coursekit.colab_check.interpreter import Interpreter
from coursekit.colab_check.torch_builds import TorchBuild

#: Bump when the way an environment is built changes, so old ones are not reused.
BUILD_RECIPE = 1
READY = "ready.json"
KERNEL_NAME = "colab-check"


class BuildError(RuntimeError):
    """A pip step failed; the message names the step and ends with pip's last lines."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "coursekit" / "colab-check"


def key(python: Interpreter, torch: TorchBuild) -> str:
    """The cached environment's folder name: the pins, the Python used, the torch build."""
    text = f"{BUILD_RECIPE} {pins.fingerprint()} {python.release} {torch.requirement}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class ColabEnvironment:
    folder: Path

    @property
    def python(self) -> Path:
        return self.folder / "venv" / "bin" / "python"

    @property
    def ready(self) -> bool:
        return (self.folder / READY).is_file() and self.python.exists()

    @property
    def kernels(self) -> Path:
        """A Jupyter data folder with one kernel spec, :data:`KERNEL_NAME`, on this Python."""
        return self.folder / "jupyter"

    def base_freeze(self) -> dict[str, str]:
        """``pip freeze`` right after the build: Colab's packages, before coursekit."""
        return json.loads((self.folder / READY).read_text())["freeze"]


def pip(env: ColabEnvironment, step: str, *arguments: str, cwd: Path | None = None) -> str:
    """Run ``python -m pip`` in the environment; BuildError naming ``step`` when it fails."""
    done = subprocess.run(
        [str(env.python), "-m", "pip", *arguments],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean_environment(),
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise BuildError(f"{step} failed (pip exited with {done.returncode}):\n{tail}")
    return done.stdout


def clean_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without what would let the checkout or the course's .venv
    leak into the Colab one (PYTHONPATH, a virtual environment's variables, a Matplotlib
    backend), plus ``extra``."""
    leaks = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "MPLBACKEND", "PYTHONSTARTUP")
    environment = {k: v for k, v in os.environ.items() if k not in leaks}
    return {**environment, **(extra or {})}


def freeze(env: ColabEnvironment) -> dict[str, str]:
    """Installed distributions: normalised name to version (``pip list``, pip itself too)."""
    listed = json.loads(pip(env, "pip list", "list", "--format=json"))
    return {pins.normalise(item["name"]): item["version"] for item in listed}


def requirements(torch: TorchBuild) -> list[str]:
    """What one pip call installs: every pin, torch as the chosen build."""
    return [torch.requirement if p.key == "torch" else str(p) for p in pins.colab_pins()]


def build(python: Interpreter, torch: TorchBuild, folder: Path, log=print) -> ColabEnvironment:
    """Make the environment in ``folder`` (anything there is removed first)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    env = ColabEnvironment(folder)
    start = time.monotonic()
    log(f"Building the Colab environment in {folder} (a torch download; minutes)...")
    made = subprocess.run(
        [str(python.path), "-m", "venv", str(folder / "venv")], capture_output=True, text=True
    )
    if made.returncode != 0:
        raise BuildError(f"python -m venv failed:\n{made.stderr.strip()[-2000:]}")
    colab_pip = next(str(p) for p in pins.colab_pins() if p.key == "pip")
    pip(env, f"installing Colab's {colab_pip}", "install", "-q", colab_pip)
    listed = folder / "colab-requirements.txt"
    listed.write_text("\n".join(requirements(torch)) + "\n")
    pip(
        env,
        f"installing Colab's packages ({torch.requirement})",
        "install",
        "-q",
        *torch.pip_options,
        "-r",
        str(listed),
    )
    write_kernel_spec(env)
    installed = freeze(env)
    wrong = [p for p in pins.colab_pins() if p.key != "torch" and installed.get(p.key) != p.version]
    if wrong:
        raise BuildError(
            "pip installed other versions than Colab's: "
            + ", ".join(
                f"{p.name} {installed.get(p.key, 'missing')} (pinned {p.version})" for p in wrong
            )
        )
    record = {"freeze": installed, "python": python.release, "torch": torch.requirement}
    (folder / READY).write_text(json.dumps(record, indent=1, sort_keys=True))
    log(f"Built in {time.monotonic() - start:.0f} s.")
    return env


def write_kernel_spec(env: ColabEnvironment) -> None:
    """A kernel spec that starts ipykernel on the environment's Python (Colab's ipykernel)."""
    spec = env.kernels / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    kernel = {
        "argv": [str(env.python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (Colab's package versions)",
        "language": "python",
    }
    (spec / "kernel.json").write_text(json.dumps(kernel, indent=1))


def torch_summary(env: ColabEnvironment) -> str:
    """``torch 2.11.0+cpu (CPU only)`` or ``... (CUDA 13.0 build)``, as the environment says."""
    code = "import torch; print(torch.__version__, torch.version.cuda or '')"
    done = subprocess.run(
        [str(env.python), "-I", "-c", code], capture_output=True, text=True, env=clean_environment()
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return "torch does not import: " + (lines[-1] if lines else f"exit {done.returncode}")
    version, _, cuda = done.stdout.strip().partition(" ")
    build = f"a CUDA {cuda} build" if cuda else "CPU only"
    return f"Installed: torch {version} ({build}; Colab's is {pins.colab_torch()})"

"""Device choice, seeding, Colab detection and the doctor's report."""

import random

import numpy as np
import pytest
import torch

from coursekit.commands.doctor import diagnose
from coursekit.environment import in_colab, pick_device, seed_everything

pytestmark = pytest.mark.module0


def test_cpu_is_chosen_when_asked_and_without_accelerators(monkeypatch):
    assert pick_device("cpu").type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("coursekit.environment._mps_available", lambda: False)
    assert pick_device().type == "cpu"
    assert pick_device("cuda").type == "cpu"  # asked for, not there: the next best


def test_cuda_is_preferred_when_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device().type == "cuda"


def test_the_environment_variable_chooses_too(monkeypatch):
    monkeypatch.setenv("COURSEKIT_DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device().type == "cpu"


def test_an_unknown_device_is_a_clear_error():
    with pytest.raises(ValueError, match="choose one of cuda, mps, cpu"):
        pick_device("tpu")


def test_seeding_makes_python_numpy_and_torch_repeat():
    seed_everything(7)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    seed_everything(7)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_colab_is_detected_from_its_environment(monkeypatch):
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    assert not in_colab()
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab_20261201")
    assert in_colab()


def test_the_doctor_reports_each_item_and_advises_on_a_missing_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("coursekit.environment._mps_available", lambda: False)
    report = diagnose()
    labels = [f.label for f in report.findings]
    assert labels[:3] == ["Python", "torch", "device"]
    assert {"ipywidgets", "Colab"} <= set(labels)
    text = report.render()
    assert "No GPU found" in text and "Runtime > Change runtime type > GPU" in text
    assert report.ok


def _machine(monkeypatch, tmp_path, *, cuda_build, driver_files=(), nvidia_smi=False):
    """Fake the doctor's probes: torch's build and devices, the driver's files, nvidia-smi."""
    from coursekit.commands import doctor

    monkeypatch.setattr(torch.version, "cuda", "12.8" if cuda_build else None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("coursekit.environment._mps_available", lambda: False)
    files = []
    for name in ("version", "nvidia0"):
        files.append(tmp_path / name)
        if name in driver_files:
            files[-1].write_text("NVRM version: 580.65\n")
    monkeypatch.setattr(doctor, "NVIDIA_DRIVER_FILES", tuple(str(f) for f in files))
    smi = "/usr/bin/nvidia-smi" if nvidia_smi else None
    monkeypatch.setattr(doctor.shutil, "which", lambda name: smi if name == "nvidia-smi" else None)
    return files


@pytest.mark.parametrize(
    ("driver_files", "nvidia_smi"), [(("version",), False), (("nvidia0",), False), ((), True)]
)
def test_a_gpu_machine_with_a_cpu_torch_hears_both(monkeypatch, tmp_path, driver_files, nvidia_smi):
    files = _machine(
        monkeypatch, tmp_path, cuda_build=False, driver_files=driver_files, nvidia_smi=nvidia_smi
    )
    text = diagnose().render()
    assert "No GPU found" not in text
    assert "This machine has an NVIDIA GPU (" in text and "is built without CUDA" in text
    assert "install a CUDA build of torch" in text
    shown = (
        "nvidia-smi is installed"
        if nvidia_smi
        else f"{files[0 if 'version' in driver_files else 1]} exists"
    )
    assert shown in text
    assert "(built without CUDA)" in text.splitlines()[1]  # the torch line says it too


def test_a_gpu_torch_cannot_use_says_why_it_may_be(monkeypatch, tmp_path):
    _machine(monkeypatch, tmp_path, cuda_build=True, driver_files=("version",))
    text = diagnose().render()
    assert "built with CUDA 12.8" in text and "torch.cuda.is_available() is False" in text
    assert "No GPU found" not in text


def test_no_gpu_and_a_cpu_torch_says_both(monkeypatch, tmp_path):
    _machine(monkeypatch, tmp_path, cuda_build=False)
    text = diagnose().render()
    assert "No GPU found" in text and "This torch is built without CUDA" in text


def test_the_doctor_names_the_gpu_and_its_memory(monkeypatch):
    monkeypatch.setattr("coursekit.environment.pick_device", lambda: torch.device("cuda"))
    monkeypatch.setattr(
        "coursekit.environment.gpu_summary",
        lambda: {"name": "NVIDIA H200", "memory_bytes": 141 * 2**30},
    )
    text = diagnose().render()
    assert "NVIDIA H200, 141.0 GiB" in text


def test_the_doctor_says_what_to_do_when_ipywidgets_is_missing(monkeypatch):
    real = __import__("coursekit.commands.doctor", fromlist=["_version"])._version
    monkeypatch.setattr(
        "coursekit.commands.doctor._version",
        lambda name: None if name == "ipywidgets" else real(name),
    )
    report = diagnose()
    assert not report.ok
    assert "pip install ipywidgets" in report.render()


def test_the_doctor_says_how_to_get_torch_when_it_is_missing(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    report = diagnose()
    assert not report.ok
    assert "pip install torch" in report.render()


def test_seeded_gives_the_same_draws_and_gives_the_callers_generator_back():
    from coursekit.environment import seeded

    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    with seeded(7):
        first = torch.randn(4)
    with seeded(7):
        second = torch.randn(4)
    assert torch.equal(first, second)
    assert torch.equal(torch.rand(3), expected_next)  # the caller's stream did not move
    with pytest.raises(RuntimeError), seeded(7):  # given back after an error too
        raise RuntimeError("inside")
    with pytest.raises(TypeError, match="seed"), seeded(1.5):
        pass

"""notebook_run: a notebook's papermill parameters, checked, and the sizes they give."""

import re

import pytest
import torch

from coursekit.parameters import NotebookRun, ParameterError, notebook_run


def test_the_defaults_are_the_cpu_run_at_the_texts_sizes(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run = notebook_run()
    assert (run.device, run.scale, run.seed, run.sizes) == (torch.device("cpu"), 1.0, 0, {})
    assert str(run) == "Run: device cpu, scale 1, seed 0."


def test_auto_picks_the_gpu_when_torch_sees_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    assert notebook_run(device="auto").device == torch.device("cuda")
    assert notebook_run(device="cpu").device == torch.device("cpu")


@pytest.mark.parametrize("size", [1, 3, 7, 100, 512, 1024])
def test_at_scale_one_every_size_is_exactly_the_texts(size):
    run = notebook_run(device="cpu", scale=1)
    assert run.size(size) == size
    assert run.size(size * 64, multiple_of=64) == size * 64
    assert run.size(size, minimum=size) == size


def test_a_floor_holds_at_scale_one_too():
    """A module's own parameter can sit below the floor a cell needs (steps = 1)."""
    run = notebook_run(device="cpu", scale=1, steps=1)
    assert run.size(run.steps, minimum=2) == 2


def test_sizes_scale_round_to_a_multiple_and_keep_a_floor():
    quarter = notebook_run(device="cpu", scale=0.25)
    assert quarter.size(512) == 128
    assert quarter.size(100, multiple_of=8) == 24  # 25 is nearest, 24 the nearest multiple
    assert quarter.size(3) == 1  # never below one
    assert quarter.size(64, minimum=32) == 32
    assert quarter.size(2, multiple_of=16) == 16  # at least one multiple
    assert notebook_run(device="cpu", scale=0.5).size(5) == 3  # halves round up
    assert notebook_run(device="cpu", scale=0.5).size(9) == 5
    assert notebook_run(device="cpu", scale=4).size(300) == 1200
    assert notebook_run(device="cpu", scale="2").size(10) == 20  # papermill -r passes text
    with pytest.raises(ValueError, match="multiple_of"):
        quarter.size(8, multiple_of=0)


def test_module_parameters_are_attributes_and_are_printed():
    run = notebook_run(device="cpu", scale=2, seed=3, width=128, world_size="4")
    assert (run.width, run.world_size) == (128, 4)
    assert str(run) == "Run: device cpu, scale 2, seed 3, width 128, world_size 4."
    with pytest.raises(AttributeError, match="no parameter 'steps'"):
        _ = run.steps
    assert isinstance(run, NotebookRun)


@pytest.mark.parametrize(
    ("parameters", "named"),
    [
        ({"scale": 0}, "scale is 0; give a number from 0.25 to 64"),
        ({"scale": -1.5}, "scale is -1.5; give a number from 0.25 to 64"),
        ({"scale": 0.1}, "scale is 0.1; give a number from 0.25 to 64"),
        ({"scale": 400}, "scale is 400; give a number from 0.25 to 64"),
        ({"scale": 10**400}, "scale is 1000"),
        ({"scale": float("nan")}, "scale is nan"),
        ({"scale": float("inf")}, "scale is inf"),
        ({"scale": "big"}, "scale is 'big'; give a number"),
        ({"scale": True}, "scale is True; give a number"),
        ({"scale": None}, "scale is None; give a number"),
        ({"scale": [1]}, "scale is [1]; give a number"),
        ({"seed": 1.5}, "seed is 1.5; give a whole number"),
        ({"seed": "x"}, "seed is 'x'; give a number"),
        ({"seed": -1}, "seed is -1; give a whole number of at least 0"),
        ({"seed": 2**31}, "seed is 2147483648; give a whole number from 0 to 2147483647"),
        ({"seed": float("inf")}, "seed is inf; give a whole number"),
        ({"width": 0}, "width is 0; give a whole number of at least 1"),
        ({"world_size": 2.5}, "world_size is 2.5; give a whole number"),
        (
            {"world_size": 1, "at_least": {"world_size": 2}},
            "world_size is 1; give a whole number of at least 2",
        ),
        ({"width": 33, "even": ("width",)}, "width is 33; give an even number"),
        ({"device": "tpu"}, "device is 'tpu'; give one of auto, cpu, cuda, cuda:N"),
        ({"device": 0}, "device is 0; give one of"),
        ({"device": "cuda:x"}, "device is 'cuda:x'; give one of"),
    ],
)
def test_a_bad_parameter_is_named_with_what_to_pass(parameters, named):
    with pytest.raises(ParameterError, match="^" + re.escape(named)):
        notebook_run(**{"device": "cpu", **parameters})


def test_asking_for_cuda_without_a_gpu_is_an_error_not_a_quiet_cpu_run(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.8")  # a CUDA build on a machine without one
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "CUDA", "cuda:0"):
        with pytest.raises(ParameterError, match="torch sees no CUDA GPU here"):
            notebook_run(device=device)


def test_a_cpu_build_of_torch_is_named_with_how_to_get_a_cuda_one(monkeypatch):
    """The likely failure on a GPU machine: a .venv made with torch's CPU build."""
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(ParameterError, match="built without CUDA.*delete .venv"):
        notebook_run(device="cuda")


def test_a_gpu_index_past_the_last_gpu_is_named(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert notebook_run(device="cuda:1").device == torch.device("cuda:1")
    assert chosen == [torch.device("cuda:1")]  # code that uses the current GPU follows
    with pytest.raises(ParameterError, match="torch sees 2 GPU"):
        notebook_run(device="cuda:2")

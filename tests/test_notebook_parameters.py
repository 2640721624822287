"""papermill parameters: every notebook has them, the build keeps them, and they reach the code.

Each source notebook opens with one cell tagged ``parameters`` (plain assignments: device,
scale, seed and the module's own sizes), and the next code cell hands every one of them to
``coursekit.notebook_run``. Each solution then runs under papermill at another scale and seed
on the CPU, and a named cell must print a size that only the new scale gives: the override went
through the notebook into the code, not just into a variable.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import papermill
import pytest

from coursekit.course import MODULES

pytestmark = pytest.mark.notebook
REPO = Path(__file__).resolve().parents[1]
NAMES = [m.name for m in MODULES]
COMMON = {"device", "scale", "seed"}
# What the test runs pass: a quarter of the sizes, another seed, the CPU named outright.
OVERRIDES = {"scale": 0.25, "seed": 1, "device": "cpu"}
# Per module: a cell, and what it prints at OVERRIDES' scale but not at the defaults.
EVIDENCE = {
    "00_welcome": ("m00-08", r"^batch  128: activations"),
    "01_accumulation": ("m01-15", r"^128 samples, 10 epochs:"),
    "02_loss_scaling": ("m02-17", r"mean loss of the last 5 steps"),
    "03_batch_dependence": ("m03-05", r"micro-batch\s+2 x\s+8:"),
    "04_distributed": ("m04-19c", r"micro-batches of 2 samples"),
    "05_capstone": ("m05-14", r"^128 lines, \d+ real tokens"),
    "06_batch_size": ("m06-03", r"^per-sample gradients: \(128, 161\)"),
}


def code_cells(notebook):
    return [c for c in notebook.cells if c.cell_type == "code"]


def tagged(notebook, tag: str):
    return [c for c in notebook.cells if tag in c.metadata.get("tags", [])]


def assigned_literals(source: str) -> dict[str, object]:
    """The cell's ``name = literal`` assignments; AssertionError for anything else."""
    values = {}
    for statement in ast.parse(source).body:
        assert isinstance(statement, ast.Assign), ast.unparse(statement)
        (target,) = statement.targets
        assert isinstance(target, ast.Name), ast.unparse(statement)
        values[target.id] = ast.literal_eval(statement.value)
    return values


def notebook_run_keywords(source: str) -> dict[str, str]:
    """keyword -> the name passed, for the cell's call of ``coursekit.notebook_run``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("notebook_run"):
            return {k.arg: ast.unparse(k.value) for k in node.keywords}
    return {}


def printed(cell) -> str:
    return "".join(
        o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream"
    )


@pytest.mark.parametrize("name", NAMES)
def test_each_source_opens_with_one_parameters_cell_that_notebook_run_receives_whole(name):
    notebook = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
    (cell,) = tagged(notebook, "parameters")
    cells = code_cells(notebook)
    assert cells[0] is cell, "the parameters cell comes before any other code"
    values = assigned_literals(cell.source)
    assert COMMON <= set(values), f"{name} lacks {COMMON - set(values)}"
    assert (values["device"], values["scale"]) == ("auto", 1)
    assert set(values) <= COMMON | {"width", "steps", "epochs", "world_size"}
    keywords = notebook_run_keywords(cells[1].source)
    assert keywords == {parameter: parameter for parameter in values}


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
@pytest.mark.parametrize("name", NAMES)
def test_the_build_keeps_the_parameters_cell_right_after_the_set_up_cell(name, folder):
    source = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
    built = nbformat.read(REPO / folder / f"{name}.ipynb", as_version=4)
    (cell,) = tagged(built, "parameters")
    assert code_cells(built)[1] is cell  # after coursekit's set-up cell
    assert cell.source == tagged(source, "parameters")[0].source


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_a_solution_run_by_papermill_at_another_scale_uses_it(name, tmp_path):
    executed = papermill.execute_notebook(
        str(REPO / "solutions" / f"{name}.ipynb"),
        str(tmp_path / f"{name}.ipynb"),
        parameters=OVERRIDES,
        cwd=str(REPO / "solutions"),
        kernel_name="python3",
        progress_bar=False,
        execution_timeout=1200,
    )
    cells = {c.get("id"): c for c in executed.cells}
    settings = "Run: device cpu, scale 0.25, seed 1"
    assert any(printed(c).startswith(settings) for c in executed.cells), settings
    cell_id, pattern = EVIDENCE[name]
    assert re.search(pattern, printed(cells[cell_id]), re.MULTILINE), printed(cells[cell_id])
    default = nbformat.read(REPO / "solutions" / f"{name}.ipynb", as_version=4)
    assert len(executed.cells) == len(default.cells) + 1  # papermill's injected cell


def test_cuda_asked_for_on_a_machine_without_one_stops_at_the_first_cell(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(papermill.PapermillExecutionError) as failure:
        papermill.execute_notebook(
            str(REPO / "solutions" / "00_welcome.ipynb"),
            str(tmp_path / "out.ipynb"),
            parameters={"device": "cuda"},
            cwd=str(REPO / "solutions"),
            kernel_name="python3",
            progress_bar=False,
        )
    assert failure.value.ename == "ParameterError"
    assert "torch sees no CUDA GPU here" in failure.value.evalue

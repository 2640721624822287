"""papermill parameters: every notebook has them, the build keeps them, and they reach the code.

Each source notebook opens with one cell tagged ``parameters`` (plain assignments: device,
scale, seed and the module's own sizes), and the next code cell hands every one of them to
``coursekit.notebook_run``. Each solution then runs under papermill at another scale and seed
on the CPU, up to the last of its named cells, each of which must print a size that only the
new parameters give: the override went through the notebook into the code, not just into a
variable.
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
# What the test runs pass: a quarter of the sizes, another seed, the CPU named outright, and
# another value for each module's own parameters (3 processes where a module starts 2).
OVERRIDES = {"scale": 0.25, "seed": 1, "device": "cpu"}
MODULE_OVERRIDES = {
    "00_welcome": {"width": 64},
    "01_accumulation": {"width": 64},
    "02_loss_scaling": {"steps": 24},
    "03_batch_dependence": {"width": 4, "epochs": 1, "world_size": 3},
    "04_distributed": {"world_size": 3},
    "05_capstone": {"width": 16, "steps": 32},
    "06_batch_size": {"steps": 100, "world_size": 3},
    "07_real_model": {"model": "tiny", "max_memory_gb": 0.02, "seq_len": 48, "steps": 2},
    "08_fitting_one_gpu": {"seq_len": 512, "tokens_per_step": 1024, "max_memory_gb": 8},
}
# Per module: (cell, what it prints with these overrides and not at the defaults), each
# showing a size or a draw that only the overrides give.
EVIDENCE = {
    "00_welcome": [("m00-08", r"^batch  128: activations  128\.0 KiB")],  # scale, width 64
    "01_accumulation": [
        ("m01-15", r"^128 samples, 10 epochs:"),  # scale
        ("m01-19", r"^1024 bytes per sample, by hand"),  # (64 + 3 x width 64) x 4
    ],
    "02_loss_scaling": [("m02-17", r"mean loss of the last 3 steps")],  # steps 24 x 0.25 / 2
    "03_batch_dependence": [
        ("m03-05", r"micro-batch\s+2 x\s+8:"),  # scale
        ("m03-21", r"^BatchNorm, batch 32\s+\d+%\s+[\d.]+$"),  # one epoch: one accuracy
        ("m03-27c", r"^gathered\s+6 keys per query"),  # 3 processes x 2 pairs
    ],
    "04_distributed": [("m04-19c", r"^\(3 processes, micro-batches of 2 samples")],
    "05_capstone": [
        ("m05-14", r"^128 lines, \d+ real tokens"),  # scale
        ("m05-14", r"^a small gpu checks four micro-batches before the step\.$"),  # seed 1
        ("m05-14", r"^9002 parameters$"),  # width 16
        ("m05-19", r"^8 optimizer steps each"),  # steps 32 x 0.25
    ],
    "06_batch_size": [
        ("m06-03", r"^per-sample gradients: \(128, 161\)"),  # scale
        ("m06-11", r"oracle on all 3 ranks' samples"),  # world_size
    ],
    "07_real_model": [
        ("m07-01", r"^memory budget: 0\.02 GiB"),  # max_memory_gb
        ("m07-03", r"sequences of \d+ to 48 tokens"),  # seq_len
        ("m07-09", r": 64 samples per optimizer step"),  # target_batch 256 x 0.25
        ("m07-20", r"^1 x 64 \(large batch\): losses \[[^,\]]+, [^,\]]+\]$"),  # steps 2
    ],
    "08_fitting_one_gpu": [
        ("m08-03", r"^4 documents per step:"),  # scale
        ("m08-05", r"packed into rows of 512:"),  # seq_len
        ("m08-05", r"^packed, 2 rows per step:"),  # tokens_per_step 1024 / seq_len 512
        ("m08-22", r"budget 7\.2 GiB"),  # max_memory_gb 8, less the planner's 10%
    ],
}


# How the tests run a solution under papermill. The kernel is killed once the last cell has
# answered (every output is in by then), not asked to shut down: a kernel that has started a
# multiprocessing child (run_workers does) does not exit on that request, and is stopped only
# after 2.5 s (half of its shutdown_wait_time).
PAPERMILL = {
    "cwd": str(REPO / "solutions"),
    "kernel_name": "python3",
    "progress_bar": False,
    "shutdown_kernel": "immediate",
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
    assert set(values) <= COMMON | {"width", "steps", "epochs", "world_size"} | {
        "model",
        "max_memory_gb",
        "seq_len",
        "target_batch",
        "tokens_per_step",
    }
    keywords = notebook_run_keywords(cells[1].source)
    rules = {k: keywords.pop(k) for k in ("at_least", "even") if k in keywords}
    assert keywords == {parameter: parameter for parameter in values}
    assert all(
        name in values
        for rule in rules.values()
        for name in re.findall(r"\w+", rule)
        if not name.isdigit()
    )


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
@pytest.mark.parametrize("name", NAMES)
def test_the_build_keeps_the_parameters_cell_right_after_the_set_up_cell(name, folder):
    source = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
    built = nbformat.read(REPO / folder / f"{name}.ipynb", as_version=4)
    (cell,) = tagged(built, "parameters")
    assert code_cells(built)[1] is cell  # after coursekit's set-up cell
    assert cell.source == tagged(source, "parameters")[0].source


def up_to_the_evidence(name: str, folder: Path) -> tuple[Path, int]:
    """The solution ``name`` up to its last cell in ``EVIDENCE``, saved in ``folder``, and
    its number of cells.

    What this file shows ends there: each override has reached the code by then. The cells
    after it run whole at the defaults under nbval, and at scale 0.25 in the exercises in
    tests/test_browser.py; running them here too cost a third of this file's time."""
    notebook = nbformat.read(REPO / "solutions" / f"{name}.ipynb", as_version=4)
    ids = [cell.get("id") for cell in notebook.cells]
    notebook.cells = notebook.cells[: max(ids.index(cell) for cell, _ in EVIDENCE[name]) + 1]
    path = folder / f"{name}-input.ipynb"
    nbformat.write(notebook, path)
    return path, len(notebook.cells)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_a_solution_run_by_papermill_with_other_parameters_uses_them(name, tmp_path):
    parameters = {**OVERRIDES, **MODULE_OVERRIDES[name]}
    source, cell_count = up_to_the_evidence(name, tmp_path)
    executed = papermill.execute_notebook(
        str(source),
        str(tmp_path / f"{name}.ipynb"),
        parameters=parameters,
        execution_timeout=1200,
        **PAPERMILL,
    )
    cells = {c.get("id"): c for c in executed.cells}
    settings = [line for c in executed.cells for line in printed(c).splitlines()]
    settings = next(line for line in settings if line.startswith("Run: "))
    for parameter, value in parameters.items():
        assert f" {parameter} {value}" in settings, settings
    for cell_id, pattern in EVIDENCE[name]:
        text = printed(cells[cell_id])
        assert re.search(pattern, text, re.MULTILINE), f"{cell_id}: {pattern!r} not in\n{text}"
    assert len(executed.cells) == cell_count + 1  # papermill's injected cell


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_cuda_asked_for_on_a_machine_without_one_stops_before_any_demonstration(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = tmp_path / "out.ipynb"
    with pytest.raises(papermill.PapermillExecutionError) as failure:
        papermill.execute_notebook(
            str(REPO / "solutions" / "01_accumulation.ipynb"),
            str(out),
            parameters={"device": "cuda"},
            **PAPERMILL,
        )
    assert failure.value.ename == "ParameterError"
    why = failure.value.evalue  # a CPU build of torch, or a CUDA one that sees no GPU
    assert why.startswith("device is 'cuda', but ")
    assert "built without CUDA" in why or "torch sees no CUDA GPU here" in why
    executed = nbformat.read(out, as_version=4)
    failed = [
        i
        for i, c in enumerate(code_cells(executed))
        if c.get("outputs") and any(o.get("output_type") == "error" for o in c.outputs)
    ]
    ran = [i for i, c in enumerate(code_cells(executed)) if c.get("execution_count")]
    assert failed == [ran[-1]]  # nothing ran after the failing cell
    assert "notebook_run(" in code_cells(executed)[failed[0]].source  # the imports cell

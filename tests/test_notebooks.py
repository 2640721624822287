"""Notebooks, executed: stubs run to the end as "not attempted", and a hand-in with known
mistakes has each one named in the notebook.

That the answers pass is shown elsewhere, each once: every public check of the solutions
passes under nbval (strict checks, see conftest.py), the hidden tests give the solution
notebook full marks in tests/test_grading_modules.py, and ``coursekit build --check`` holds
solutions/ to be what notebooks/ builds. (A run of each source notebook's checks here repeated
the first of these, at nine kernels' cost.)

nbval runs solutions/ whole at the defaults (see pyproject.toml), and the untouched exercises
run whole here, at the smallest scale (their notebook parameter ``scale``, 0.25, as in the
browser test): they hold the same demonstrations, and what is asserted of them does not depend
on the sizes. The mistake runs skip the demonstration cells (tagged ``demo``:
they define nothing a question or its check needs, which ``coursekit build --check`` enforces).
"""

from pathlib import Path

import nbformat
import pytest
from papermill.iorw import load_notebook_node
from papermill.parameterize import parameterize_notebook

from coursekit.authoring.demo_cells import DEMO_TAG
from coursekit.authoring.markup import question_name
from coursekit.checks import evaluate
from coursekit.course import MODULES
from tests.corpora import student_code
from tests.helpers import kernels

pytestmark = pytest.mark.notebook
REPO = Path(__file__).resolve().parents[1]
NAMES = [m.name for m in MODULES]


QUICK = {"scale": 0.25, "device": "cpu"}  # a quick run's parameters (test_notebook_parameters)


def execute(
    path: Path,
    replace: dict[str, str] | None = None,
    graded_only: bool = False,
    parameters: dict | None = None,
) -> nbformat.NotebookNode:
    """Run a notebook top to bottom (stopping at the first error) and return it with outputs.

    ``graded_only``: only the cells a verdict depends on, the set-up, imports, questions and
    their check cells, without the demonstrations (tagged ``demo``) that nbval and the
    untouched-exercise run execute anyway. ``parameters``: notebook parameters, set as
    papermill sets them (a cell after the one tagged ``parameters``)."""
    if parameters:  # papermill's own reading gives every cell the tags list it looks for
        nb = parameterize_notebook(load_notebook_node(str(path)), parameters)
    else:
        nb = nbformat.read(path, as_version=4)
    if graded_only:
        nb.cells = [c for c in nb.cells if c.cell_type == "code" and _needed_for_verdicts(c)]
    for cell in nb.cells:
        name = question_name(cell)
        if replace and name in replace:
            cell.source = f"# Question: {name}\n{replace[name]}"
    # Killed once the last cell has answered (every output is in by then), not asked to shut
    # down: a kernel that has started a multiprocessing child (run_workers does) does not exit
    # on that request, and is stopped only after 2.5 s (half of its shutdown_wait_time).
    kernels.execute(nb, timeout_s=1200, cwd=path.parent, shutdown_kernel="immediate")
    return nb


def _needed_for_verdicts(cell) -> bool:
    return DEMO_TAG not in cell.metadata.get("tags", []) or cell.source.startswith("check(")


def text_of(cell) -> str:
    """What the cell printed (stdout; warnings on stderr are not the verdict)."""
    return "".join(
        o.get("text", "")
        for o in cell.get("outputs", [])
        if o.output_type == "stream" and o.get("name") == "stdout"
    )


def check_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and c.source.lstrip().startswith("check(")]


@pytest.mark.parametrize("name", NAMES)
def test_the_untouched_exercise_runs_to_the_end_and_every_check_says_not_attempted(
    name, monkeypatch
):
    monkeypatch.delenv("COURSEKIT_STRICT_CHECKS", raising=False)
    nb = execute(REPO / "exercises" / f"{name}.ipynb", parameters=QUICK)
    assert any(text_of(c).startswith("Run: device cpu, scale 0.25,") for c in nb.cells)
    checks = check_cells(nb)
    assert checks, "each module has graded questions"
    for cell in checks:
        assert text_of(cell).startswith("[not attempted]"), text_of(cell)
    assert not any(o.output_type == "error" for c in nb.cells for o in c.get("outputs", []))


HAND_INS = {
    "00_welcome": [{"effective_batch_size": "world_size_ignored"}],
    "01_accumulation": [
        {
            "accumulate_window": "loss_not_divided",
            "train_accumulated": "last_window_scaled_by_n",
            "plan_micro_batch": "not_largest",
        },
        {
            "accumulate_window": "zero_grad_inside_loop",
            "train_accumulated": "step_every_micro_batch",
            "plan_micro_batch": "effective_batch_wrong",
        },
    ],
    "02_loss_scaling": [
        {
            "loss_scales": "mean_of_means",
            "accumulate_tokens": "padding_counted",
            "global_token_scale": "token_count_not_summed_across_ranks",
            "amp_window": "unscale_every_micro_batch",
            "accumulate_in_float32": "accumulated_in_bf16",
            "train_scheduled": "scheduler_every_micro_batch",
        },
        {
            "loss_scales": "sum_not_divided",
            "accumulate_tokens": "mean_of_means",
            "global_token_scale": "world_size_not_multiplied",
            "amp_window": "inf_micro_batch_dropped",
            "accumulate_in_float32": "grad_not_cleared",
            "train_scheduled": "scheduler_before_optimizer",
        },
    ],
    "03_batch_dependence": [
        {
            "accumulation_momentum": "power_not_root",
            "to_group_norm": "wrong_groups",
            "grad_cache_step": "keys_not_backpropagated",
        },
        {
            "accumulation_momentum": "none_momentum_not_skipped",
            "to_group_norm": "model_not_returned",
            "grad_cache_step": "whole_batch_forward",
        },
    ],
    "04_distributed": [
        {
            "resolve_batch_config": "world_size_ignored",
            "ddp_window": "forward_outside_no_sync",
            "zero_memory": "everything_sharded",
        },
    ],
    "05_capstone": [
        {
            "plan_accumulation": "remainder_dropped",
            "recipe_window": "clip_every_micro_batch",
            "count_steps": "short_window_not_counted",
        },
    ],
    "06_batch_size": [
        {
            "noise_scale": "partial_sums_not_micro_batches",
            "scaled_hyperparameters": "warmup_not_rescaled",
            "ramp_plan": "loss_scale_not_updated",
        },
    ],
    "07_real_model": [{"autotune": "freed_while_error_alive"}],
    "08_fitting_one_gpu": [{"pack_documents": "boundary_labels_kept"}],
}


@pytest.mark.parametrize(
    ("name", "mistakes"), [(n, m) for n, runs in HAND_INS.items() for m in runs]
)
def test_a_hand_in_with_known_mistakes_has_each_one_named(name, mistakes, monkeypatch):
    monkeypatch.delenv("COURSEKIT_STRICT_CHECKS", raising=False)
    sources = {q: student_code.BY_QUESTION[q][m] for q, m in mistakes.items()}
    nb = execute(REPO / "exercises" / f"{name}.ipynb", replace=sources, graded_only=True)
    printed = {c.source.split('"')[1]: text_of(c) for c in check_cells(nb)}
    for question, mistake in mistakes.items():
        verdict = evaluate(question, student_code.load(question, mistake))
        assert verdict.mistake == mistake
        assert printed[question].strip() == verdict.render(), question

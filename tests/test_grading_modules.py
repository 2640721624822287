"""The batch grader on every module: the reference runs in the sandbox, a right hand-in gets
full marks, so does the solution notebook handed in as it is (its demo cells skipped),
every mistake a student makes in modules 2 and up is named in the feedback, as the
notebook's checks name it, and no known variant, right or wrong, is flagged. Module 4's
checks run a one-process gloo group inside the sandbox. (Module 1's named mistakes have
their own, larger corpus: test_grading_corpus.py.)"""

import contextlib
import io
import json
import shutil

import pytest

from coursekit.authoring.demo_cells import released_demos
from coursekit.checks import questions_of
from coursekit.commands.cli import main
from coursekit.grading.grader import Plan, cells_to_run, exercise_demos, recorded_demos
from coursekit.grading.handin import read_hand_in
from coursekit.grading.sandbox.driver import Limits
from tests.corpora import student_code
from tests.helpers.git_history import PREVIOUS_RELEASE, at_commit
from tests.helpers.hand_ins import REPO, cells_of, notebook

pytestmark = pytest.mark.grading
# assignment -> student -> {question: variant}; questions not named get the right answer.
HAND_INS = {
    "00_welcome": {"ada": {}},
    "01_accumulation": {"ada": {}},  # its mistakes: test_grading_corpus.py
    "02_loss_scaling": {
        "ada": {},
        "ben": {
            "loss_scales": "mean_of_means",
            "accumulate_tokens": "padding_counted",
            "global_token_scale": "token_count_not_summed_across_ranks",
            "amp_window": "unscale_every_micro_batch",
            "accumulate_in_float32": "accumulated_in_bf16",
            "train_scheduled": "scheduler_every_micro_batch",
        },
        "cyd": {
            "loss_scales": "sum_divided_by_count",
            "accumulate_tokens": "mean_of_means",
            "global_token_scale": "averaged_not_summed",
            "amp_window": "clipped_before_unscale",
            "accumulate_in_float32": "bf16_buffer_converted",
            "train_scheduled": "scheduler_never_stepped",
        },
        "dev": {
            "loss_scales": "correct_with_numpy",
            "accumulate_tokens": "correct_with_coursekit_helpers",
            "global_token_scale": "correct_per_micro_batch_tensor",
            "accumulate_in_float32": "correct_summed_at_the_end",
            "amp_window": "update_every_micro_batch",
            "train_scheduled": "last_window_scaled_by_n",
        },
    },
    "03_batch_dependence": {
        "ada": {},
        "ben": {
            "accumulation_momentum": "divided_by_n",
            "to_group_norm": "batchnorm_left",
            "grad_cache_step": "negatives_per_micro_batch",
        },
        "cyd": {
            "accumulation_momentum": "none_momentum_not_skipped",
            "to_group_norm": "affine_not_copied",
            "grad_cache_step": "graph_kept_for_all_micro_batches",
        },
        "dev": {
            "accumulation_momentum": "correct_with_explicit_classes",
            "to_group_norm": "correct_via_named_modules",
            "grad_cache_step": "keys_not_backpropagated",
        },
    },
    "04_distributed": {
        "ada": {},
        "ben": {
            "resolve_batch_config": "inconsistent_accepted",
            "ddp_window": "no_sync_missing",
            "zero_memory": "fp32_master_weights_forgotten",
        },
        "cyd": {
            "resolve_batch_config": "wrong_exception",
            "ddp_window": "off_by_one_boundary",
            "zero_memory": "not_bytes",
        },
        "dev": {
            "resolve_batch_config": "remainder_ignored",
            "ddp_window": "correct_with_if_else",
            "zero_memory": "world_size_ignored",
        },
        # passes every test but the memory test, measured in the runner's own fork
        "eve": {"ddp_window": "whole_window_elsewhere"},
    },
    "05_capstone": {
        "ada": {},
        "ben": {
            "plan_accumulation": "rounded_up",
            "recipe_window": "mean_of_means",
            "count_steps": "scheduler_not_multiplied",
        },
        "cyd": {
            "plan_accumulation": "wrong_exception",
            "recipe_window": "scheduler_every_micro_batch",
            "count_steps": "deepspeed_counted_like_the_loop",
        },
        "dev": {
            "plan_accumulation": "correct_full_micro_batches_then_the_rest",
            "recipe_window": "zero_grad_missing",
            "count_steps": "correct_by_simulation",
        },
    },
    "06_batch_size": {
        "ada": {},
        "ben": {
            "noise_scale": "big_norm_as_true_norm",
            "scaled_hyperparameters": "linear_for_adam",
            "ramp_plan": "scheduler_in_micro_steps",
        },
        "cyd": {
            "noise_scale": "grads_left_behind",
            "scaled_hyperparameters": "warmup_rounded_down",
            "ramp_plan": "samples_skipped",
        },
        "dev": {
            "noise_scale": "correct_torch_func",
            "scaled_hyperparameters": "correct_fractions",
            "ramp_plan": "correct_generator",
        },
    },
    "07_real_model": {
        "ada": {},
        "ben": {"autotune": "error_swallowed"},
        "cyd": {"autotune": "freed_while_error_alive"},
        "dev": {"autotune": "correct_top_down_bisection"},
    },
    "08_fitting_one_gpu": {
        "ada": {},
        "ben": {"pack_documents": "eos_masked_with_padding"},
        "dev": {"pack_documents": "correct_with_torch"},
    },
}


# Questions whose rules changed since the previous release, on purpose (issue 33): a frozen
# parameter gets a zero sum, AdamW's weight decay is scaled. That release's answers to them
# lose points now, as any hand-in written to the old text would; the test of demo-cell
# skipping below hands in the current answers to these questions, the old ones to the rest.
# to_group_norm: its eps and affine=False rules are tested since issue 42
CHANGED_SINCE_PREVIOUS_RELEASE = {
    "accumulate_in_float32",
    "scaled_hyperparameters",
    "to_group_norm",
}


def with_current_answers(previous: str) -> str:
    """The previous release's solution, with the current answers to the questions whose
    rules changed since (CHANGED_SINCE_PREVIOUS_RELEASE)."""
    old = json.loads(previous)
    answers = {
        name: student_code.BY_QUESTION[name]["correct"] for name in CHANGED_SINCE_PREVIOUS_RELEASE
    }
    for cell in old["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        for name, answer in answers.items():
            if cell["cell_type"] == "code" and source.startswith(f"# Question: {name}"):
                cell["source"] = f"# Question: {name}\n{answer}"
    return json.dumps(old)


# Generous for a busy machine: a slow run must not read as a student's timeout.
LIMITS = ["--cell-timeout", "20", "--test-timeout", "10", "--timeout", "300", "--wall-factor", "3"]


def every_variant(assignment: str) -> dict[str, dict[str, str]]:
    """student -> {question: variant}: every correct style and every mistake the test suite
    knows (tests/student_code*.py, those tests/test_mutation.py runs), once each. Hand-in
    ``v<i>`` answers each question with its ``i``-th variant (modulo their number), so they
    take as few hand-ins as the question with the most variants needs."""
    variants = {q.name: sorted(student_code.BY_QUESTION[q.name]) for q in questions_of(assignment)}
    if not variants:
        return {}
    count = max(len(v) for v in variants.values())
    return {f"v{i:02d}": {q: v[i % len(v)] for q, v in variants.items()} for i in range(count)}


class _Shared:
    """The warm parent of one ``grade`` run, kept for the next: ``close()`` ends nothing.
    Each run forks its reference and its hand-ins from it as from its own (a warm parent
    holds nothing of a run), so the module's ten runs start Python and torch once, not ten
    times (about 2 CPU-s each). tests/test_warm_parent.py starts and ends its own."""

    def __init__(self, parent):
        self._parent = parent

    def __getattr__(self, name):
        return getattr(self._parent, name)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def one_warm_parent():
    from coursekit.grading.sandbox import warm_parent

    made = warm_parent.WarmParent
    held = [made()]

    def shared():
        if held[0].stopped.is_set():  # a batch stopped (it failed): the next gets a new one
            held[0].close()
            held[0] = made()
        return _Shared(held[0])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(warm_parent, "WarmParent", shared)
        try:
            yield held
        finally:
            held[0].close()


@pytest.fixture(scope="module", params=sorted(HAND_INS))
def graded(request, tmp_path_factory, one_warm_parent):
    """One batch per module, graded once: the hand-ins above, the solution as it is, the
    previous release's solution, and every known variant (``every_variant``)."""
    assignment = request.param
    base = tmp_path_factory.mktemp(f"grading-{assignment}")
    for student, variants in {**HAND_INS[assignment], **every_variant(assignment)}.items():
        folder = base / "hand-ins" / student
        folder.mkdir(parents=True)
        (folder / f"{assignment}.ipynb").write_text(
            notebook(cells_of(assignment, variants), assignment)
        )
    # the source notebook's solution, handed in as it is: its demo cells are skipped
    (base / "hand-ins" / "sol").mkdir()
    shutil.copy(REPO / "solutions" / f"{assignment}.ipynb", base / "hand-ins" / "sol")
    # the previous release's solution (its demo cells did not yet read papermill parameters),
    # graded as the course is now: its demo cells are skipped all the same
    previous = at_commit(f"solutions/{assignment}.ipynb")
    if previous is not None:
        (base / "hand-ins" / "old").mkdir()
        (base / "hand-ins" / "old" / f"{assignment}.ipynb").write_text(
            with_current_answers(previous)
        )
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = main(
            [
                "grade",
                str(base / "hand-ins"),
                "--assignment",
                assignment,
                "--json",
                "--workers",
                "2",
                "--gradebook",
                str(base / "gradebook.sqlite"),
                "--root",
                str(REPO),
                *LIMITS,
            ]
        )
    assert status == 0
    results = [json.loads(line) for line in stdout.getvalue().splitlines()]
    return assignment, {result["student"]: result for result in results}


def test_a_right_hand_in_gets_full_marks(graded):
    assignment, results = graded
    result = results["ada"]
    assert result["error"] is None
    assert result["score"] == result["max_score"] == sum(q.points for q in questions_of(assignment))


def test_the_solution_with_its_demo_cells_skipped_gets_full_marks(graded):
    assignment, results = graded
    hand_in = read_hand_in(REPO / "solutions" / f"{assignment}.ipynb", assignment, "sol")
    plan = Plan(assignment, {}, {}, Limits(), demos=exercise_demos(REPO, assignment))
    assert None in cells_to_run(hand_in, plan)  # grading skipped demo cells of this hand-in
    result = results["sol"]
    assert result["error"] is None and result["notes"] == [], result
    assert result["score"] == result["max_score"] == sum(q.points for q in questions_of(assignment))


def test_the_previous_release_s_solution_skips_its_demo_cells_and_gets_full_marks(graded, tmp_path):
    assignment, results = graded
    previous = at_commit(f"solutions/{assignment}.ipynb")
    if previous is None:
        pytest.skip(f"needs the course's git history (commit {PREVIOUS_RELEASE})")
    path = tmp_path / f"{assignment}.ipynb"
    path.write_text(with_current_answers(previous))
    hand_in = read_hand_in(path, assignment, "old")
    demos = exercise_demos(REPO, assignment)
    now = Plan(
        assignment, {}, {}, Limits(), demos=demos, earlier_demos=recorded_demos(REPO, assignment)
    )
    released_then = released_demos(json.loads(at_commit(f"exercises/{assignment}.ipynb")))
    then = Plan(assignment, {}, {}, Limits(), demos=released_then)  # as that release graded it
    skipped = cells_to_run(hand_in, now)
    assert skipped == cells_to_run(hand_in, then) and None in skipped
    current_only = Plan(assignment, {}, {}, Limits(), demos=demos)
    assert skipped.count(None) > cells_to_run(hand_in, current_only).count(None)
    result = results["old"]
    assert result["error"] is None and result["notes"] == [], result
    assert result["score"] == result["max_score"] == sum(q.points for q in questions_of(assignment))


def test_each_mistake_is_named_and_costs_only_its_question(graded):
    assignment, results = graded
    for student, variants in HAND_INS[assignment].items():
        by_name = {q["name"]: q for q in results[student]["questions"]}
        for question in questions_of(assignment):
            variant = variants.get(question.name, "correct")
            graded_question = by_name[question.name]
            if variant.startswith("correct"):
                assert graded_question["score"] == question.points, (student, graded_question)
            else:
                mistake = student_code.mistake_of(variant)
                assert mistake in graded_question["mistakes"], (student, graded_question)
                assert graded_question["score"] < question.points


def test_no_correct_style_and_no_mistake_is_flagged(graded):
    """No false flags (issue 29): every variant the test suite knows goes through the real
    grader and none is flagged for review. A mistake is not tampering, and a flag an
    instructor learns to ignore protects nothing."""
    assignment, results = graded
    planned = every_variant(assignment)
    if not planned:
        pytest.skip(f"{assignment} has no graded questions")
    assert set(planned) <= set(results)
    flagged = {
        student: (variants, [n for n in results[student]["notes"] if "Flagged" in n])
        for student, variants in planned.items()
        if any("Flagged" in n for n in results[student]["notes"])
    }
    assert flagged == {}


def _flags(tmp_path, assignment: str, hand_ins: dict[str, tuple[str, str]]) -> dict:
    """student -> the flags ``grade`` gives a hand-in of ``assignment`` whose one answer is
    ``hand_ins[student]``: ``(question, source)``."""
    for student, (question, source) in hand_ins.items():
        folder = tmp_path / assignment / "hand-ins" / student
        folder.mkdir(parents=True)
        cells = ["import torch\nimport coursekit", f"# Question: {question}\n{source}"]
        (folder / f"{assignment}.ipynb").write_text(notebook(cells, assignment))
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        arguments = ["grade", str(tmp_path / assignment / "hand-ins"), "--assignment", assignment]
        gradebook = tmp_path / assignment / "g.sqlite"
        arguments += ["--json", "--gradebook", str(gradebook), "--root", str(REPO)]
        assert main(arguments) == 0
    results = {r["student"]: r for r in map(json.loads, stdout.getvalue().splitlines())}
    return {s: [n for n in r["notes"] if n.startswith("Flagged")] for s, r in results.items()}


def test_an_answer_that_calls_the_library_s_tuner_is_flagged_and_module_5_s_planner_is_not(
    tmp_path, one_warm_parent
):
    """Module 7's notebook imports ``coursekit.real_model.tune`` for its demonstrations: a
    hand-in whose autotune just calls it is flagged for review (the question names it in
    ``library_answers``), by its name in the package or by the module name of earlier
    releases (``coursekit.autotune``), while one that plans its window with module 5's answer
    is not (an earlier module's answer is library code here)."""
    borrowed = (
        "from {module} import tune\n\n"
        "def autotune(try_step, free_memory, max_memory_gb, target_batch, world_size=1,"
        " margin=0.1):\n"
        "    return tune(try_step, target_batch, max_memory_gb, world_size, margin,"
        " free_memory, False).as_dict()\n"
    )
    flags = _flags(
        tmp_path,
        "07_real_model",
        {
            "eve": ("autotune", borrowed.format(module="coursekit.autotune")),
            "fay": ("autotune", borrowed.format(module="coursekit.real_model")),
            "dev": ("autotune", student_code.BY_QUESTION["autotune"]["correct_top_down_bisection"]),
        },
    )
    assert flags["dev"] == [], flags
    for student in ("eve", "fay"):
        assert any("its autotune called coursekit's own answer" in n for n in flags[student]), flags


_RIGHT_WINDOW_OF_MODULE_4 = """
import contextlib
from coursekit.checks.module04.ddp_memory import right_window

class Synced:  # a model without DDP, whose no_sync() does nothing
    def __init__(self, model):
        self.model = model
    def __call__(self, inputs):
        return self.model(inputs)
    def no_sync(self):
        return contextlib.nullcontext()

def accumulate_window(model, loss_fn, micro_batches):
    right_window(Synced(model), loss_fn, micro_batches)
"""


def test_coursekit_s_answers_by_other_names_are_flagged_where_they_answer(
    tmp_path, one_warm_parent
):
    """Coursekit code that answers a question under another name, found by
    tests/test_answer_routes.py, is flagged when a hand-in's function calls it while that
    question is tested: module 1's ``train_accumulated``, which takes a scheduler, for
    module 2's ``train_scheduled`` (an earlier module's answer is library code elsewhere);
    the checks' own loops (``loop_variants.run_loop``); a memory test's warm-up, a right
    window the check keeps for itself, in its own module and in an earlier one (module 4's
    for module 1's window, found by review). An honest hand-in beside them is not flagged."""
    borrowed = {
        "02_loss_scaling": {
            "eve": (
                "train_scheduled",
                "def train_scheduled(model, optimizer, scheduler, loss_fn, micro_batches,"
                " accum_steps):\n"
                "    coursekit.train_accumulated(model, optimizer, loss_fn, micro_batches,"
                " accum_steps, scheduler=scheduler)\n",
            ),
            "fay": (
                "train_scheduled",
                "from coursekit.checks.loop_variants import run_loop\n\n"
                "def train_scheduled(model, optimizer, scheduler, loss_fn, micro_batches,"
                " accum_steps):\n"
                "    run_loop(model, optimizer, loss_fn, micro_batches, accum_steps,"
                " scheduler=scheduler)\n",
            ),
            "gus": (
                "amp_window",
                "from coursekit.checks.module02 import amp_window as check\n\n"
                "def amp_window(model, optimizer, scaler, loss_fn, micro_batches, max_norm):\n"
                "    check._warm_up(model, loss_fn, micro_batches)\n",
            ),
            "dev": ("train_scheduled", student_code.BY_QUESTION["train_scheduled"]["correct"]),
        },
        "01_accumulation": {
            "hal": ("accumulate_window", _RIGHT_WINDOW_OF_MODULE_4),
            "dev": ("accumulate_window", student_code.BY_QUESTION["accumulate_window"]["correct"]),
        },
    }
    for assignment, hand_ins in borrowed.items():
        flags = _flags(tmp_path, assignment, hand_ins)
        assert flags["dev"] == [], flags
        for student, (question, _) in hand_ins.items():
            if student != "dev":
                wanted = f"its {question} called coursekit's own answer"
                assert any(wanted in n for n in flags[student]), (student, flags[student])

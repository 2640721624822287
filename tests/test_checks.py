"""check(...): the right answer passes, a stub is "not attempted", each known mistake is named."""

import pytest
import torch

from coursekit.checks import QUESTIONS, Failure, Status, check, evaluate
from coursekit.checks.loop_variants import MISTAKES
from tests.corpora import student_code


def _case(question: str, variant: str):
    """A (question, variant) parameter marked with its module (``pytest -m module2``)."""
    number = int(QUESTIONS[question].module[:2])
    return pytest.param(question, variant, marks=getattr(pytest.mark, f"module{number}"))


# Mutants the public check must catch and name; those only the grader's draw can catch, or
# whose mistake no name fits, are tested in tests/test_mutation.py.
CASES = [
    _case(question, variant)
    for question, variants in student_code.BY_QUESTION.items()
    for variant in variants
    if not variant.startswith("correct")
    and (question, variant) not in student_code.HIDDEN_ONLY | student_code.UNNAMED
]
CORRECT = [
    _case(question, variant)
    for question, variants in student_code.BY_QUESTION.items()
    for variant in variants
    if variant.startswith("correct")
]


@pytest.mark.parametrize(("question", "variant"), CORRECT)
def test_right_answers_pass_every_public_check(question, variant):
    result = evaluate(question, student_code.load(question, variant))
    assert result.status is Status.PASSED, result.render()
    assert result.passed == result.total == len(QUESTIONS[question].public_specs())


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
@pytest.mark.parametrize(("question", "mistake"), CASES)
def test_each_known_mistake_is_named(question, mistake):
    result = evaluate(question, student_code.load(question, mistake))
    assert result.status is Status.FAILED, result.render()
    assert result.mistake == student_code.mistake_of(mistake), result.render()
    assert result.message


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_every_loop_mistake_has_a_hand_in_that_shows_it(mistake):
    assert mistake in student_code.TRAIN_ACCUMULATED


def test_loss_not_divided_message_says_how_many_times_too_large():
    result = evaluate(
        "accumulate_window", student_code.load("accumulate_window", "loss_not_divided")
    )
    assert "exactly 4 times" in result.message
    assert "not divided by the number of micro-batches" in result.message
    assert "accum_steps" not in result.message  # exercise 1.1 has no such name


def test_global_token_scale_says_how_the_check_plays_the_other_ranks():
    """all_reduce imported by name escapes the played ranks: the message says to use dist."""
    fn = student_code.load("global_token_scale", "functions_imported_by_name")
    result = evaluate("global_token_scale", fn)
    assert result.mistake == "token_count_not_summed_across_ranks", result.render()
    assert "import torch.distributed as dist" in result.message
    right = evaluate("global_token_scale", student_code.load("global_token_scale", "correct"))
    assert "import torch.distributed" not in right.render()


def test_a_negated_loss_is_called_a_flipped_sign_not_a_scale():
    result = evaluate("accumulate_window", student_code.load("accumulate_window", "wrong_sign"))
    assert result.mistake == "wrong_sign", result.render()
    assert "opposite way" in result.message and "-1 times" in result.message
    assert "right way" not in result.message and "divide" not in result.message


def test_zero_grad_inside_the_loop_message_says_only_the_last_micro_batch_counted():
    fn = student_code.load("accumulate_window", "zero_grad_inside_loop")
    assert "last micro-batch" in evaluate("accumulate_window", fn).message


@pytest.mark.parametrize("question", sorted(QUESTIONS))
def test_an_untouched_stub_is_not_attempted(question):
    def stub(*args, **kwargs):
        raise NotImplementedError("Replace this line with your code.")

    result = evaluate(question, stub)
    assert result.status is Status.NOT_ATTEMPTED
    assert result.render().startswith("[not attempted]")


def test_an_exception_in_student_code_is_one_line_with_its_type_not_a_traceback():
    def broken(model, loss_fn, micro_batches):
        return 1 / 0

    result = evaluate("accumulate_window", broken)
    assert result.status is Status.ERROR
    assert "ZeroDivisionError" in result.message
    assert "Traceback" not in result.render()


def test_passing_something_that_is_not_a_function_is_explained():
    result = evaluate("accumulate_window", None)
    assert result.status is Status.ERROR
    assert "Pass the function itself" in result.message


def test_an_unknown_question_lists_the_known_ones():
    with pytest.raises(KeyError, match="accumulate_window"):
        evaluate("no_such_question", lambda: None)


def test_hidden_tests_are_announced_and_never_all_tests_passed(capsys, monkeypatch):
    monkeypatch.delenv("COURSEKIT_STRICT_CHECKS", raising=False)
    check("accumulate_window", student_code.load("accumulate_window", "correct"))
    printed = capsys.readouterr().out
    assert printed.startswith("[passed] accumulate_window: 4 of 4 public checks pass.")
    assert "Hidden tests run when your notebook is graded" in printed
    assert "all tests passed" not in printed.lower()


def test_without_hidden_tests_the_verdict_does_not_mention_them():
    result = evaluate("effective_batch_size", student_code.load("effective_batch_size", "correct"))
    assert "Hidden" not in result.render()


def test_strict_mode_raises_on_anything_but_passed(monkeypatch, capsys):
    monkeypatch.setenv("COURSEKIT_STRICT_CHECKS", "1")
    with pytest.raises(AssertionError, match="did not pass"):
        check(
            "effective_batch_size", student_code.load("effective_batch_size", "world_size_ignored")
        )
    check("effective_batch_size", student_code.load("effective_batch_size", "correct"))
    assert "[passed]" in capsys.readouterr().out


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    evaluate("train_accumulated", student_code.load("train_accumulated", "correct"))
    assert torch.equal(torch.rand(3), expected)


def test_a_warning_raised_by_the_students_code_does_not_clutter_the_verdict(
    capsys, recwarn, monkeypatch
):
    monkeypatch.delenv("COURSEKIT_STRICT_CHECKS", raising=False)
    check(
        "train_scheduled",
        student_code.load("train_scheduled", "scheduler_before_optimizer"),
    )
    assert "scheduler.step() ran before optimizer.step()" in capsys.readouterr().out
    assert not [w for w in recwarn if "lr_scheduler.step()" in str(w.message)]


# ------------------------------------------------ messages that name the mistake (issue 33)


def _verdict(question: str, variant: str, spec: dict):
    """The Failure (or None) one spec gives a variant, as the grader judges it: run, then
    judge against the reference's outputs."""
    checked = QUESTIONS[question]
    expected = checked.run(checked.reference(), spec)
    try:
        checked.judge(spec, checked.run(student_code.load(question, variant), spec), expected)
    except Failure as failure:
        return failure
    return None


@pytest.mark.parametrize(
    ("question", "variant", "says", "never"),
    [
        ("noise_scale", "mean_over_k_minus_1", "divided by k - 1", "differs from"),
        ("noise_scale", "batch_size_from_pair", "len(micro_batches[0][0])", "differs from"),
        ("noise_scale", "eval_mode_left", "eval mode", "hook"),
        ("accumulate_in_float32", "divided_by_micro_batch_size", "micro-batch size, 8", "once"),
        ("accumulate_in_float32", "buffers_kept_between_calls", "twice the sums", "accumulated"),
        ("global_token_scale", "count_cached", "made no all_reduce", "own count"),
        ("global_token_scale", "async_not_awaited", "wait()", "own count"),
        ("count_steps", "extra_step_per_epoch", "one step too many in every epoch", "Accelerate"),
        ("ramp_plan", "schedule_popped", "changed schedule", "never trained"),
        ("ramp_plan", "windows_in_default_argument", "Called twice", "window 1"),
        ("recipe_window", "labels_shifted_again", "shifted once more", "differ from the recipe"),
        ("scaled_hyperparameters", "weight_decay_not_scaled", "decoupled", "by the rules"),
        ("scaled_hyperparameters", "weight_decay_dropped", "rule 4", "by the rules"),
        ("to_group_norm", "eps_not_kept", "eps=child.eps", "learned weight"),
        ("to_group_norm", "affine_off_zeroed", "affine=False", "rounded"),
        # observed: the card's limit reached, never "did not stop" (it may have, later)
        ("autotune", "counting_down", "called try_step 20 times", "never"),
    ],
)
def test_a_recognisable_mistake_is_named_in_its_message(question, variant, says, never):
    result = evaluate(question, student_code.load(question, variant))
    assert result.mistake == student_code.mistake_of(variant), result.render()
    assert says in result.message and never not in result.message, result.message


def test_a_schedule_read_in_micro_batches_is_named_where_it_shows_and_never_said_ignored():
    spec = {"total": 40, "micro": 2, "schedule": [[0, 4], [8, 1], [20, 2]]}
    failure = _verdict("ramp_plan", "schedule_in_micro_batches", spec)
    assert failure.mistake == "schedule_in_micro_batches", failure.message
    assert "micro-batch 4 or later" in failure.message
    public = evaluate("ramp_plan", student_code.load("ramp_plan", "schedule_in_micro_batches"))
    assert "never took effect" not in public.message  # they did, counted in micro-batches
    assert "within these 100 samples" in public.message


def test_unscaled_betas_have_one_name_where_the_rule_must_refuse_too():
    spec = {"base_lr": 1e-3, "base_batch": 32, "new_batch": 512, "kind": "adam", "warmup": 10}
    failure = _verdict("scaled_hyperparameters", "betas_not_scaled_nor_checked", spec)
    assert failure.mistake == "betas_not_scaled", failure.message
    assert "with k = 16, k(1 - beta1)" in failure.message and "K(1" not in failure.message
    refusal = _verdict("scaled_hyperparameters", "beta_range_not_checked", spec)
    assert refusal.mistake == "bad_input_accepted", refusal.message
    assert refusal.message.startswith("With k = 16, k(1 - beta1)") and "K(1" not in refusal.message


def test_adamw_weight_decay_scales_by_the_root_and_adam_s_stays():
    spec = {"base_lr": 3e-4, "base_batch": 32, "new_batch": 128, "kind": "adam", "warmup": 50}
    spec["weight_decay"] = 0.01
    failure = _verdict("scaled_hyperparameters", "weight_decay_scaled_in_the_loss", spec)
    assert failure.mistake == "weight_decay_scaled_in_the_loss", failure.message
    assert _verdict("scaled_hyperparameters", "correct", spec) is None


def test_one_process_is_not_processes():
    spec = {"micro": 12, "accum": 4, "epochs": 2, "procs": 1}
    failure = _verdict("count_steps", "epochs_ignored", spec)
    assert "1 process)" in failure.message and "1 processes" not in failure.message


def test_a_frozen_parameter_left_out_is_named_and_one_handled_passes():
    spec = {"seed": 5, "accum_steps": 6, "micro_batch_size": 4, "frozen": True}
    failure = _verdict("accumulate_in_float32", "frozen_parameter_skipped", spec)
    assert failure.mistake == "frozen_parameter_skipped" and "3 tensors" in failure.message
    assert _verdict("accumulate_in_float32", "correct", spec) is None


def test_a_side_effect_report_from_the_hand_in_is_read_only_as_known_codes():
    """judge() trusts nothing: an unknown code or a path of another shape says nothing."""
    from coursekit.checks.side_effects import judge_left_behind

    judge_left_behind({"left_changed": ["rm -rf", 3], "input_changed": "x\n<script>"}, "()")
    with pytest.raises(Failure) as failure:
        judge_left_behind({"left_changed": ["grad_mode"]}, "(here)")
    assert failure.value.mistake == "state_left_changed"
    assert "gradient recording off" in failure.value.message


def test_the_checks_put_torch_s_switches_back_after_a_hand_in_that_leaves_them():
    before = torch.is_grad_enabled(), torch.get_default_dtype()
    evaluate("to_group_norm", student_code.load("to_group_norm", "default_dtype_left"))
    evaluate("accumulate_window", student_code.load("accumulate_window", "grad_mode_left"))
    assert (torch.is_grad_enabled(), torch.get_default_dtype()) == before


def test_a_cut_log_is_said_to_be_cut_never_read_as_the_whole_search():
    """A search that ran out of calls, whose log sent back was cut: the feedback says which
    entries it read, and counts calls from the card, not from the cut log."""
    question = QUESTIONS["autotune"]
    spec = question.public_specs()[0]  # a share of 256: 20 calls allowed
    sent = [{"event": "free"}] * 100 + [{"event": "oom", "size": s, "held": 0} for s in range(20)]
    outputs = {"stopped": False, "calls": 21, "log": sent, "log_entries": 400, "held_at_end": 0}
    with pytest.raises(Failure) as failure:
        question.judge(spec, outputs, question.run(question.reference(), spec))
    assert failure.value.mistake == "too_many_probes"
    message = failure.value.message
    assert "called try_step 20 times" in message, message  # the card's count, not the log's
    assert "120 entries of its log sent back (of 400)" in message, message
    assert "never" not in message, message  # that it would not stop, no log can show

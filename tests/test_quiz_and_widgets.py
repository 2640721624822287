"""Quizzes give instant feedback; the memory planner renders and follows its sliders."""

import ipywidgets
import pytest
import torch

from coursekit.course import MODULES
from coursekit.models import tiny_mlp
from coursekit.quizzes import QUIZZES, quiz
from coursekit.quizzes.widget import Quiz, QuizQuestion, feedback
from coursekit.widgets import memory_planner, planner_html

QUESTION = QuizQuestion("2 + 2?", ("3", "4"), 1, "Because arithmetic.")


def test_feedback_for_right_wrong_and_no_answer():
    assert feedback(QUESTION, 1) == (True, "Correct. Because arithmetic.")
    assert feedback(QUESTION, 0) == (False, "Not quite. Because arithmetic.")
    assert feedback(QUESTION, None) == (False, "Pick an answer first.")
    assert feedback(QUESTION, 5)[0] is False


def test_an_answer_outside_the_options_is_refused_when_written():
    with pytest.raises(ValueError, match="not an option"):
        QuizQuestion("?", ("a",), 1, "")


def test_clicking_check_shows_the_feedback():
    box = Quiz("t", [QUESTION]).widget()
    _prompt, options, button, result = box.children[1].children
    button.click()
    assert "Pick an answer first" in result.value
    options.value = 0
    button.click()
    assert "Not quite" in result.value
    options.value = 1
    button.click()
    assert "Correct" in result.value


def test_the_text_fallback_answers_by_number(capsys):
    q = Quiz("t", [QUESTION])
    assert "1. 2 + 2?" in q.as_text()
    q.answer(1, 2)
    assert capsys.readouterr().out.startswith("[right] Correct.")


def test_module_1_quiz_has_the_seed_questions():
    prompts = " ".join(q.prompt for q in quiz("01_accumulation").questions)
    assert "What does gradient accumulation let you do?" in prompts
    assert "when do optimizer.step() and optimizer.zero_grad() run?" in prompts
    assert set(QUIZZES) == {m.name for m in MODULES}  # every module has its quiz
    with pytest.raises(ValueError, match="module must be one of '00_welcome'"):
        quiz("99_nothing")
    with pytest.raises(ValueError, match="Did you mean '01_accumulation'"):
        quiz("01_acumulation")


def test_the_planner_measures_activations_for_the_chosen_micro_batch():
    model = tiny_mlp(in_features=8, hidden=16, depth=2)
    optimizer = torch.optim.Adam(model.parameters())
    html = planner_html(model, optimizer, lambda n: torch.zeros(n, 8), 4, 8)
    assert "4 x 8 = 32 samples" in html
    assert f"activations: {4 * (8 + 16) * 4} B" in html


def test_the_planner_widget_updates_when_a_slider_moves():
    model = tiny_mlp(in_features=8, hidden=16, depth=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    box = memory_planner(model, optimizer, lambda n: torch.zeros(n, 8), max_micro_batch=64)
    micro, accum, view = box.children
    assert isinstance(view, ipywidgets.HTML)
    micro.value = 2
    accum.value = 3
    assert "2 x 3 = 6 samples" in view.value


def test_the_loss_scaling_explorer_follows_its_sliders():
    from coursekit.widgets import loss_scaling_explorer

    box = loss_scaling_explorer()
    accum, padding, size, spread, draw, view = box.children
    assert "sum / window's tokens (right)" in view.value
    accum.value, padding.value, size.value, spread.value = 1, 0.0, 4, 0.0
    assert view.value.count("+0.00%") == 5  # one micro-batch, no padding: all agree
    padding.value = 0.5
    assert "+0.00%" in view.value and "-" in view.value.split("positions")[1][:200]


def test_module_2_quiz_covers_scaling_tokens_the_scaler_and_schedules():
    text = quiz("02_loss_scaling").as_text()
    for topic in ("lr = 0.08", "100 real tokens", "all_reduce", "scaler.step", "750 steps"):
        assert topic in text


def test_module_3_quiz_has_the_seed_questions():
    prompts = " ".join(q.prompt for q in quiz("03_batch_dependence").questions)
    assert "Which normalisation layer pairs cleanly with gradient accumulation" in prompts
    assert "four micro-batches of 8 with BatchNorm give a different gradient" in prompts


def test_the_batchnorm_explorer_follows_its_controls():
    from coursekit.widgets import batchnorm_explorer

    micro, accum, norm, corrected, view = batchnorm_explorer().children
    assert "a different gradient" in view.value and "0.344" in view.value
    corrected.value = True
    assert "weighs 0.100" in view.value
    norm.value = "group"
    assert "the same gradient" in view.value and "none" in view.value
    accum.value, micro.value = 1, 8
    assert "the same gradient" in view.value


def test_the_zero_calculator_and_the_pipeline_view_follow_their_controls():
    from coursekit.widgets import pipeline_view, zero_calculator

    parameters, stage, world, accum, micro, accounting, view = zero_calculator().children
    assert "120.0 GB" in view.value  # 7.5B, stage 0
    assert "8 x 4 x 64 = 2,048 samples" in view.value
    stage.value = 2
    accounting.value = "deepspeed"
    assert "17.1 GB" in view.value  # DeepSpeed's estimator: 2 psi + 18 psi / 64
    accounting.value = "fp32"
    assert "31.4 GB" in view.value  # fp32 weights whole: 4 psi + (4 + 8) psi / 64
    stage.value, accounting.value = 1, "deepspeed"
    assert "stages 2 and 3 only" in view.value
    accounting.value = "paper"
    stage.value = 3
    assert "1.9 GB" in view.value and "12 x the model" in view.value  # 3N with N = 4
    world.value = 1
    assert "0 x the model" in view.value
    stages, micro, schedule, view = pipeline_view().children
    stages.value, micro.value = 4, 4
    assert "42.9%" in view.value and view.value.count("<tr>") == 4
    micro.value = 16
    assert "15.8%" in view.value and "held at once: 16" in view.value
    schedule.value = "1f1b"
    assert "15.8%" in view.value and "held at once: 4" in view.value


def test_module_4_quiz_checks_the_arithmetic_it_teaches():
    text = quiz("04_distributed").as_text()
    assert "train_batch_size" in text and "16.6 GB" in text and "28" in text


def test_the_final_quiz_spans_the_whole_course():
    final = quiz("05_capstone")
    assert len(final.questions) == 10
    text = final.as_text()
    for topic in (
        "i % accum_steps == 0",  # module 1: the window's end
        "508 steps",  # module 2: schedules in optimizer steps
        "bfloat16",  # module 2: bf16 under autocast
        "Freeze the BatchNorm layers",  # module 3
        "no_sync()",  # module 4
        "17 psi",  # module 4: FSDP with gradient sync off
        "25 and 4",  # capstone: planning the micro-batch
        "checkpoint",  # capstone: activation checkpointing
        "Accelerator(gradient_accumulation_steps=8)",  # capstone: the frameworks
        "num_items_in_batch",
    ):
        assert topic in text
    assert len({q.answer for q in final.questions}) == 4  # the right answer moves around


def test_module_6_quiz_checks_the_numbers_it_teaches():
    module6 = quiz("06_batch_size")
    text = module6.as_text()
    # the linear rule with warm-up kept in samples, Malladi's square-root rule, the fitted B_crit
    for number in ("63 warm-up steps", "(0.6, 0.996), eps 5e-9", "Near 500"):
        assert number in text
    assert len({q.answer for q in module6.questions}) == 3  # the right answer moves around


def test_the_accumulation_advisor_follows_its_sliders():
    from coursekit.widgets import accumulation_advisor

    memory, target, critical, devices, more, view = accumulation_advisor().children
    assert isinstance(view, ipywidgets.HTML) and "advice: accumulate" in view.value
    target.value = 4096  # past the critical batch (256): stop there
    assert "past the critical batch" in view.value
    more.value = 4  # free devices: add them rather than accumulate
    assert "advice: add devices" in view.value
    memory.value = 1024  # the whole (critical) batch fits in one pass
    more.value = 0
    assert "advice: as is" in view.value


def test_quiz_options_that_wrap_get_room_instead_of_overlapping():
    """Radio labels are one fixed line high in JupyterLab and Colab; the quiz's style lets a
    long option wrap under its own text (module 6's options run to two lines)."""
    box = quiz("06_batch_size").widget()
    style, questions = box.children[0].value, box.children[1:]
    assert "height: auto" in style and "white-space: normal" in style
    for question in questions:
        options = question.children[1]
        assert isinstance(options, ipywidgets.RadioButtons)
        assert "coursekit-quiz-options" in options._dom_classes
        assert ".coursekit-quiz-options label" in style


def test_module_7_quiz_checks_the_numbers_it_teaches():
    module7 = quiz("07_real_model")
    text = module7.as_text()
    # ceil(256 / 24) = 11 = 3 x 24 + 8 x 23; ceil(256 / 28) = 10 = 6 x 26 + 4 x 25
    assert "3 of 24 and 8 of 23" in text and "6 of 26 and 4 of 25" in text
    assert 3 * 24 + 8 * 23 == 6 * 26 + 4 * 25 == 256
    assert len({q.answer for q in module7.questions}) == 3  # the right answer moves around


def test_the_autotune_explorer_follows_its_sliders():
    from coursekit.real_model.widget import autotune_explorer

    # 2 MiB fixed, 1.7 MiB per sample: a 1/32 GiB card less 10% holds 15
    memory, target, devices, margin, view = autotune_explorer(
        2 * 2**20, 17 * 2**20 // 10, 1 / 32
    ).children
    assert "largest micro-batch that fits: 15" in view.value
    assert "256 samples per optimizer step" in view.value
    memory.value = 1 / 64  # half the card: the micro-batch about halves, the batch stays
    assert "largest micro-batch that fits: 7" in view.value
    assert "256 samples per optimizer step" in view.value
    devices.value = 4
    assert "on each of 4 devices" in view.value
    memory.value = 2**-10  # 1 MiB: not even one sample
    assert "No plan:" in view.value and "micro-batch of 1 needs" in view.value

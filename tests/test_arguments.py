"""Every public function that takes counts, sizes or settings refuses bad input with a
``TypeError`` or ``ValueError`` that names the argument: never a wrong number, a ``KeyError``,
a ``ZeroDivisionError`` or a traceback from inside torch.

Each row of ``CALLS`` is a function, arguments it accepts, and the kind of each argument the
test then breaks, one at a time, with values drawn by Hypothesis."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coursekit import arguments
from coursekit.batch_norm import corrected_momentum, set_accumulation_momentum
from coursekit.budget import fit_micro_batch, largest_micro_batch, plan_accumulation, search_probes
from coursekit.checkpointing import Checkpointed, checkpoint_costs
from coursekit.contrastive import info_nce, make_pairs, tiny_encoder
from coursekit.data import make_classification, make_images, make_regression, split_micro_batches
from coursekit.distributed import run_workers
from coursekit.gpt import generate, tiny_gpt
from coursekit.loss_scaling import loss_scales
from coursekit.memory import activation_bytes_by_size
from coursekit.models import norm_layer, tiny_cnn, tiny_lm, tiny_mlp
from coursekit.pipeline import (
    bubble_fraction,
    gpipe_schedule,
    interleaved_bubble_fraction,
    measured_bubble,
    one_f_one_b_schedule,
)
from coursekit.quizzes import quiz
from coursekit.schedules import optimizer_steps, warmup_cosine, warmup_linear_decay
from coursekit.step_counts import count_steps, deepspeed_boundaries, loop_boundaries
from coursekit.text import line_batches, make_lines
from coursekit.tokens import make_token_batches, split_token_batches
from coursekit.training import samples_per_second, windows
from coursekit.units import format_bytes
from coursekit.zero import (
    COLLECTIVES,
    COMMUNICATION,
    bytes_sent_per_process,
    communication_formula,
    communication_per_step,
    deepspeed_communication_per_step,
    resolve_batch_config,
    zero_bytes_per_device,
)

_X, _Y = torch.zeros(8, 2), torch.zeros(8)
_TOKENS = make_token_batches(4, seq_len=6)
_GPT = tiny_gpt(8, 4, dim=4, heads=1, layers=1)


def _optimizer():
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)


# (name, function, keyword arguments it accepts, {argument: kind}); kinds:
#   "count1": a whole number >= 1    "count0": a whole number >= 0    "seed": any whole number
#   ("real", low, high, high_open): a finite number in that range   ("choice", options)
CALLS = [
    ("gpipe_schedule", gpipe_schedule, {"stages": 4, "micro_batches": 8},
     {"stages": "count1", "micro_batches": "count1"}),
    ("bubble_fraction", bubble_fraction, {"stages": 4, "micro_batches": 8},
     {"stages": "count1", "micro_batches": "count1"}),
    ("one_f_one_b_schedule", one_f_one_b_schedule, {"stages": 4, "micro_batches": 8},
     {"stages": "count1", "micro_batches": "count1"}),
    ("interleaved_bubble_fraction", interleaved_bubble_fraction, {"stages": 4,
     "micro_batches": 8, "chunks": 2}, {"stages": "count1", "micro_batches": "count1",
     "chunks": "count1"}),
    ("measured_bubble", lambda stages: measured_bubble(gpipe_schedule(4, 4), stages),
     {"stages": 4}, {"stages": "count1"}),
    ("zero_bytes_per_device", zero_bytes_per_device, {"n_parameters": 7.5e9, "stage": 2,
     "world_size": 64}, {"n_parameters": ("real", 0, None, False),
     "stage": ("choice", (0, 1, 2, 3)), "world_size": "count1", "k": ("real", 0, None, False)}),
    ("resolve_batch_config", resolve_batch_config, {"world_size": 4, "train_batch_size": 256,
     "train_micro_batch_size_per_gpu": 8}, {"world_size": "count1", "train_batch_size": "count1",
     "train_micro_batch_size_per_gpu": "count1"}),
    # every row of the table is a valid setup ("zero1", five letters, was drawn as a bad one)
    ("communication_formula", communication_formula, {"setup": "ddp"},
     {"setup": ("choice", tuple(COMMUNICATION))}),
    ("communication_per_step", communication_per_step, {"setup": "ddp", "accum_steps": 4},
     {"setup": ("choice", tuple(COMMUNICATION)), "accum_steps": "count1"}),
    ("plan_accumulation", plan_accumulation, {"target_batch": 100, "max_micro_batch": 32,
     "world_size": 2}, {"target_batch": "count1", "world_size": "count1"}),
    ("largest_micro_batch", lambda limit: largest_micro_batch(lambda n: n < 5, limit),
     {"limit": 8}, {"limit": "count1"}),
    ("bytes_sent_per_process", bytes_sent_per_process,
     {"setup": "ddp", "accum_steps": 4, "world_size": 2},
     {"setup": ("choice", tuple(COLLECTIVES)), "accum_steps": "count1", "world_size": "count1"}),
    ("deepspeed_communication_per_step", deepspeed_communication_per_step,
     {"stage": 2, "accum_steps": 4}, {"stage": ("choice", [1, 2]), "accum_steps": "count1"}),
    ("optimizer_steps", optimizer_steps, {"n_micro_batches": 10, "accum_steps": 4, "epochs": 2},
     {"n_micro_batches": "count0", "accum_steps": "count1", "epochs": "count0"}),
    ("count_steps", count_steps,
     {"micro_batches_per_epoch": 10, "accum_steps": 4, "epochs": 2, "num_processes": 2},
     {"micro_batches_per_epoch": "count0", "accum_steps": "count1", "epochs": "count0",
      "num_processes": "count1"}),
    ("deepspeed_boundaries", deepspeed_boundaries,
     {"micro_batches_per_epoch": 10, "accum_steps": 4, "epochs": 2},
     {"micro_batches_per_epoch": "count0", "accum_steps": "count1", "epochs": "count0"}),
    ("loop_boundaries", loop_boundaries,
     {"micro_batches_per_epoch": 10, "accum_steps": 4, "epochs": 2},
     {"micro_batches_per_epoch": "count0", "accum_steps": "count1", "epochs": "count0"}),
    ("warmup_linear_decay", lambda **k: warmup_linear_decay(_optimizer(), **k),
     {"warmup_steps": 0, "total_steps": 10**9}, {"warmup_steps": "count0"}),
    ("warmup_cosine", lambda **k: warmup_cosine(_optimizer(), **k),
     {"warmup_steps": 2, "total_steps": 10**9, "final_fraction": 0.1},
     {"warmup_steps": "count0", "final_fraction": ("real", 0, 1, False)}),
    ("make_regression", make_regression, {"n_samples": 4, "in_features": 2, "out_features": 1,
     "noise": 0.1, "seed": 0}, {"n_samples": "count1", "in_features": "count1",
     "out_features": "count1", "noise": ("real", 0, None, False), "seed": "seed"}),
    ("make_classification", make_classification, {"n_samples": 4, "in_features": 2,
     "n_classes": 2, "seed": 0}, {"n_samples": "count1", "in_features": "count1",
     "n_classes": "count1", "seed": "seed"}),
    ("make_images", make_images, {"n_images": 2, "size": 4, "seed": 0},
     {"n_images": "count1", "size": "count1", "seed": "seed"}),
    ("split_micro_batches", lambda micro_batch_size: split_micro_batches(_X, _Y,
     micro_batch_size), {"micro_batch_size": 3}, {"micro_batch_size": "count1"}),
    ("norm_layer", norm_layer, {"kind": "group", "channels": 4, "dims": 1, "groups": 2},
     {"kind": ("choice", ("batch", "group", "layer", "none")), "channels": "count1",
     "dims": ("choice", (1, 2)), "groups": "count1"}),
    ("tiny_mlp", tiny_mlp, {"in_features": 2, "hidden": 3, "out_features": 1, "depth": 2,
     "seed": 0}, {"in_features": "count1", "hidden": "count1", "out_features": "count1",
     "depth": "count1", "seed": "seed", "norm": ("choice", ("batch", "group", "none"))}),
    ("tiny_lm", tiny_lm, {"vocab_size": 8, "dim": 4, "seed": 0},
     {"vocab_size": "count1", "dim": "count1", "seed": "seed"}),
    ("tiny_cnn", tiny_cnn, {"norm": "batch", "width": 2, "n_classes": 2, "seed": 0},
     {"norm": ("choice", ("batch", "group")), "width": "count1", "n_classes": "count1",
     "seed": "seed"}),
    ("tiny_gpt", tiny_gpt, {"vocab_size": 8, "context": 4, "dim": 4, "heads": 1, "layers": 1,
     "seed": 0}, {"vocab_size": "count1", "context": "count1", "layers": "count0",
     "seed": "seed"}),
    ("generate", lambda **k: generate(_GPT, [1], **k), {"new_tokens": 2, "seed": 0},
     {"new_tokens": "count0", "seed": "seed"}),
    ("make_token_batches", make_token_batches, {"n_sequences": 2, "seq_len": 6,
     "padding_ratio": 0.5, "seed": 0}, {"n_sequences": "count1", "seq_len": "count1",
     "padding_ratio": ("real", 0, 1, True), "seed": "seed"}),
    ("split_token_batches", lambda size: split_token_batches(*_TOKENS, [2, size]),
     {"size": 2}, {"size": "count1"}),
    ("make_lines", make_lines, {"n_lines": 2, "seed": 0}, {"n_lines": "count1", "seed": "seed"}),
    ("line_batches", lambda context: line_batches(["a b."], context), {"context": 4},
     {"context": "count1"}),
    ("windows", lambda accum_steps: windows([1, 2, 3], accum_steps), {"accum_steps": 2},
     {"accum_steps": "count1"}),
    ("corrected_momentum", corrected_momentum, {"momentum": 0.1, "accum_steps": 4},
     {"momentum": ("real", 0, 1, False), "accum_steps": "count1"}),
    ("set_accumulation_momentum", lambda accum_steps: set_accumulation_momentum(
     tiny_mlp(norm="batch"), accum_steps), {"accum_steps": 2}, {"accum_steps": "count1"}),
    ("loss_scales", lambda size, reduction: loss_scales([size, 2], reduction),
     {"size": 2, "reduction": "mean"}, {"size": "count1",
     "reduction": ("choice", ("mean", "sum"))}),
    ("format_bytes", format_bytes, {"n_bytes": 1536}, {"n_bytes": ("real", None, None, False)}),
    ("Checkpointed", lambda segments: Checkpointed(tiny_mlp(depth=3), segments),
     {"segments": 2}, {"segments": "count1"}),
    ("checkpoint_costs", lambda **k: checkpoint_costs(tiny_mlp(in_features=2), _X, _Y[:, None],
     progress=False, **k), {"segments_options": (1,), "repeats": 1}, {"repeats": "count1"}),
    ("activation_bytes_by_size", lambda size: activation_bytes_by_size(tiny_mlp(in_features=2),
     lambda n: torch.zeros(n, 2), [size]), {"size": 2}, {"size": "count1"}),
    ("fit_micro_batch", lambda **k: fit_micro_batch(tiny_mlp(in_features=2), lambda n: (
     torch.zeros(n, 2), torch.zeros(n, 1)), progress=False, **k),
     {"budget_bytes": 2**20, "limit": 4}, {"budget_bytes": ("real", 0, None, False),
     "limit": "count1"}),
    ("search_probes", search_probes, {"limit": 8}, {"limit": "count1"}),
    ("samples_per_second", lambda **k: samples_per_second(lambda: None, progress=False, **k),
     {"n_samples": 4, "repeats": 1, "warmup": 0, "min_time_s": 0.0}, {"n_samples": "count1",
     "repeats": "count1", "warmup": "count0", "min_time_s": ("real", 0, None, False)}),
    ("make_pairs", make_pairs, {"n_pairs": 4, "in_features": 2, "seed": 0},
     {"n_pairs": "count1", "in_features": "count1", "seed": "seed"}),
    ("tiny_encoder", tiny_encoder, {"in_features": 2, "out_features": 2, "seed": 0},
     {"in_features": "count1", "out_features": "count1", "seed": "seed"}),
    ("info_nce", lambda temperature: info_nce(torch.ones(2, 2), torch.ones(2, 2), temperature),
     {"temperature": 0.1}, {"temperature": ("real", 0, None, False)}),
    ("quiz", quiz, {"module": "01_accumulation"}, {"module": ("choice", ("01_accumulation",))}),
]  # fmt: skip

_NOT_NUMBERS = st.one_of(
    st.booleans(), st.none(), st.text(max_size=3), st.lists(st.integers(), max_size=2)
)
_NOT_WHOLE = st.one_of(
    _NOT_NUMBERS,
    st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not x.is_integer()),
    st.floats(min_value=-4, max_value=64).filter(float.is_integer),  # 4.0 is not 4 either
)


def bad_values(kind) -> st.SearchStrategy:
    """Values an argument of ``kind`` must refuse."""
    if kind in ("count1", "count0", "seed"):
        minimum = {"count1": 1, "count0": 0, "seed": None}[kind]
        too_small = (
            st.integers(max_value=minimum - 1, min_value=-(2**70))
            if minimum is not None
            else st.nothing()
        )
        return st.one_of(_NOT_WHOLE, too_small)
    if kind[0] == "real":
        _, low, high, high_open = kind
        outside = [st.just(math.nan), st.just(math.inf), st.just(-math.inf)]
        if low is not None:
            outside.append(st.floats(max_value=low, exclude_max=True, allow_nan=False))
        if high is not None:
            outside.append(st.floats(min_value=high, exclude_min=not high_open, allow_nan=False))
        return st.one_of(_NOT_NUMBERS, *outside)
    options = kind[1]
    return st.one_of(
        st.booleans(),
        st.none(),
        st.text(max_size=6).filter(lambda s: s not in options),
        st.integers(min_value=-3, max_value=9).filter(lambda i: i not in options),
        st.floats(allow_nan=False).filter(lambda x: x not in options),
    )


CASES = [
    pytest.param(function, accepted, argument, kind, id=f"{name}-{argument}")
    for name, function, accepted, kinds in CALLS
    for argument, kind in kinds.items()
]


@pytest.mark.slow  # over 3 s: out of the quick run (-m 'not slow')
@pytest.mark.parametrize(("function", "accepted", "argument", "kind"), CASES)
def test_bad_input_is_refused_with_the_argument_named(function, accepted, argument, kind):
    function(**accepted)  # the row itself is valid

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(value=bad_values(kind))
    def refused(value):
        with pytest.raises((TypeError, ValueError)) as raised:
            function(**{**accepted, argument: value})
        assert type(raised.value) in (TypeError, ValueError), raised.value
        assert argument in str(raised.value), raised.value

    refused()


@pytest.mark.parametrize("world_size", [0, -1, 2.0, True, "2", None])
def test_run_workers_refuses_a_bad_world_size_before_starting_anything(world_size):
    with pytest.raises((TypeError, ValueError), match="world_size"):
        run_workers("coursekit.workers.distributed.hello", world_size, progress=False)


def test_run_workers_refuses_a_worker_it_could_not_import():
    with pytest.raises(TypeError, match="importable module"):
        run_workers(print, 2, progress=False)


def test_the_review_cases_are_refused_or_right():
    """The cases the content review found, each as it was reported."""
    for call in (
        lambda: bubble_fraction(0, 2),
        lambda: bubble_fraction(1, 0),
        lambda: measured_bubble([], 2),
        lambda: communication_formula("zero3"),
        lambda: communication_per_step("ddp", -3),
        lambda: resolve_batch_config(2.5, train_batch_size=8, gradient_accumulation_steps=1),
        lambda: zero_bytes_per_device(-1, 1, 4),
        lambda: zero_bytes_per_device(1e9, True, 4),
        lambda: zero_bytes_per_device(1e9, 1, 2.5),
        lambda: plan_accumulation(True, 1),
    ):
        with pytest.raises((TypeError, ValueError)):
            call()
    with pytest.raises(ValueError) as raised:
        plan_accumulation(2, 8, 4)
    assert "4 or 4" not in str(raised.value) and "such as 4." in str(raised.value)
    with pytest.raises(ValueError, match="fsdp"):
        communication_formula("zero3")


@st.composite
def _target_and_maximum(draw):
    """Any target up to 2**80, and a maximum that needs at most 1,000 micro-batches."""
    target = draw(st.integers(min_value=1, max_value=2**80))
    return target, draw(st.integers(min_value=max(1, target // 1000), max_value=2**80))


@given(_target_and_maximum())
@settings(max_examples=200, deadline=None)
def test_plan_accumulation_is_exact_for_any_size(case):
    """Whole-number arithmetic: past 2**53 a float ceiling gave micro-batches above the maximum."""
    target, max_micro = case
    plan = plan_accumulation(target, max_micro)
    assert sum(plan.sizes) == target
    assert max(plan.sizes) <= max_micro
    assert max(plan.sizes) - min(plan.sizes) <= 1
    assert len(plan.sizes) == -(-target // max_micro)


def test_the_helpers_accept_what_they_should():
    assert arguments.whole("n", torch.tensor(3)) == 3
    assert arguments.whole("seed", -5, minimum=None) == -5
    assert arguments.real("x", 1, 0, 1) == 1.0
    assert format_bytes(torch.tensor(1536.0)) == "1.5 KiB"
    with pytest.raises(TypeError, match="n_bytes"):
        format_bytes(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"Did you mean 'mean'"):
        arguments.choice("reduction", "meen", ("mean", "sum"))
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        arguments.real("padding_ratio", 1.0, 0, 1, high_open=True)

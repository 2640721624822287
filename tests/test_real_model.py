"""Module 7's library: the auto-tuner and its simulated card, the real (tiny) language model
and its loss, the recipe's runs, and the frameworks' finders beside the tuner. The graded
question has its mutation tests in test_mutation.py and its notebook runs in
test_notebooks.py."""

from __future__ import annotations

import sys

import pytest
import torch

from coursekit.budget import NothingFits
from coursekit.parameters import ParameterError, notebook_run
from coursekit.real_model import language_model, memory, training
from coursekit.real_model.simulated_device import ProbingDidNotStop, SimulatedDevice
from coursekit.real_model.tuning import (
    CPU_CARD_GB,
    GIB,
    autotune,
    is_out_of_memory,
    memory_budget_gb,
    tune,
)

pytestmark = pytest.mark.module7
MIB = 2**20


def card(**more) -> SimulatedDevice:
    """16 GiB, 2 GiB fixed, 300 MiB per sample: 8 GiB less 10% holds 17 samples."""
    settings = {"capacity_bytes": 16 * GIB, "base_bytes": 2 * GIB, "per_sample_bytes": 300 * MIB}
    return SimulatedDevice(**{**settings, **more})


# ----------------------------------------------------------------------------- the tuner


def test_the_tuner_finds_the_largest_fit_under_the_budget_and_an_exact_window():
    device = card()
    tuning = tune(device.try_step, 256, 8, free=device.free_memory, progress=False)
    assert tuning.largest_fit == 17  # 2048 + 17 x 300 MiB <= 0.9 x 8 GiB < 2048 + 18 x 300
    assert tuning.plan.accum_steps == 16 and sum(tuning.plan.sizes) == 256
    assert max(tuning.plan.sizes) <= 17
    probed = [size for size, _ in tuning.probes]
    assert probed[:6] == [1, 2, 4, 8, 16, 32] and len(probed) == len(set(probed))


def test_an_uneven_window_says_how_to_weigh_its_micro_batches():
    device = card()
    tuning = tune(device.try_step, 250, 8, free=device.free_memory, progress=False)
    assert sorted(set(tuning.plan.sizes)) == [16, 17] and sum(tuning.plan.sizes) == 250
    assert "sizes differ by one" in str(tuning)


def test_the_tuner_frees_failed_tries_after_the_except_block():
    device = card(capacity_bytes=8 * GIB, base_bytes=GIB, per_sample_bytes=150 * MIB)
    device.held_fraction = 1.0  # a failed try holds all it asked for, until freed
    tuning = tune(device.try_step, 512, 8, free=device.free_memory, progress=False)
    assert tuning.largest_fit == 42  # as if nothing had ever been held
    assert device.held_bytes == 0
    assert all(entry.get("held", 0) == 0 for entry in device.log if entry["event"] != "free")


def test_the_card_keeps_a_failed_try_s_memory_while_its_exception_lives():
    device = card(capacity_bytes=GIB, base_bytes=0, per_sample_bytes=100 * MIB)
    device.held_fraction = 0.5
    try:
        device.try_step(20)
    except torch.OutOfMemoryError:
        device.free_memory()  # inside the except block: the exception still exists
    assert device.held_bytes == 1000 * MIB
    device.free_memory()
    assert device.held_bytes == 0
    try:
        device.try_step(20)
    except torch.OutOfMemoryError as error:
        kept = error
    device.free_memory()
    assert device.held_bytes == 1000 * MIB  # kept in a variable: still alive
    del kept
    device.free_memory()
    assert device.held_bytes == 0


def test_the_tuner_lets_an_error_that_is_not_about_memory_through():
    device = card(error_from=12)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        tune(device.try_step, 256, 8, free=device.free_memory, progress=False)


def test_the_tuner_refuses_when_not_even_one_sample_fits():
    device = card(base_bytes=15 * GIB)
    with pytest.raises(NothingFits, match=r"micro-batch of 1 needs .* over the budget"):
        tune(device.try_step, 64, 16, free=device.free_memory, progress=False)
    with pytest.raises(ValueError, match="cannot be shared by 4 devices"):
        autotune(card().try_step, card().free_memory, 8, 250, 4)


def test_a_search_that_never_stops_cannot_catch_the_card_s_stop():
    device = card(max_calls=3)

    def forever():
        size = 1
        while True:
            try:
                device.try_step(size)
            except Exception:  # noqa: BLE001  (the mistake under test)
                pass
            size += 1

    with pytest.raises(ProbingDidNotStop):
        forever()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), True),
        (RuntimeError("CUDA error: out of memory"), True),
        (RuntimeError("cuBLAS: CUBLAS_STATUS_ALLOC_FAILED"), True),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 9 GB"), True),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), False),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), False),
        (MemoryError(), False),
    ],
)
def test_out_of_memory_errors_are_told_from_other_errors(error, expected):
    assert is_out_of_memory(error) is expected


def test_the_budget_is_the_card_s_or_a_simulated_one_and_is_checked():
    cpu = torch.device("cpu")
    assert memory_budget_gb(None, cpu) == CPU_CARD_GB
    assert memory_budget_gb(0.5, cpu) == 0.5
    with pytest.raises(ParameterError, match="above 0"):
        memory_budget_gb(-1.0, cpu)
    run = notebook_run(device="cpu", model="tiny", max_memory_gb="0.25", seq_len=64)
    assert (run.model, run.max_memory_gb, run.seq_len) == ("tiny", 0.25, 64)
    assert str(run).startswith("Run: device cpu, scale 1, seed 0, model tiny, max_memory_gb 0.25")
    for bad in ("", "two words", 3):
        with pytest.raises(ParameterError, match="model is"):
            notebook_run(model=bad)
    with pytest.raises(ParameterError, match="max_memory_gb is"):
        notebook_run(max_memory_gb="lots")


# ------------------------------------------------------------------- the language model


@pytest.fixture(scope="module")
def lm():
    return language_model.load("tiny", torch.device("cpu"), seed=0, max_positions=64)


def test_auto_on_a_cpu_is_the_tiny_model_and_a_hub_model_offline_is_a_clear_error():
    cpu = torch.device("cpu")
    assert language_model.resolve_name("auto", cpu) == "tiny"
    assert language_model.resolve_name("auto", torch.device("cuda")) == "gpt2"
    with pytest.raises(ParameterError, match="HF_HUB_OFFLINE=1 forbids downloads.*model='tiny'"):
        language_model.load("gpt2", cpu)


def test_the_tiny_model_is_a_transformers_causal_lm_with_the_shipped_tokenizer(lm):
    assert type(lm.model).__name__ == "GPT2LMHeadModel" and not lm.from_hub
    assert len(lm.tokenizer) == 1024
    text = "Accumulate, then step once per window."
    ids = lm.tokenizer(text)["input_ids"]
    assert lm.tokenizer.decode(ids) == text  # byte-level: nothing is lost
    assert all(
        not module.p for module in lm.model.modules() if isinstance(module, torch.nn.Dropout)
    )


def test_sequences_have_different_lengths_and_padding_is_never_scored(lm):
    sequences = language_model.sequences(lm.tokenizer, 64)
    lengths = {len(ids) for ids in sequences}
    assert max(lengths) == 64 and min(lengths) >= 8 and len(lengths) > 20
    batch = language_model.collate(sequences[:6], lm.tokenizer.pad_token_id)
    padded = batch["attention_mask"] == 0
    assert padded.any() and (batch["labels"][padded] == -100).all()
    expected = sum(len(ids) - 1 for ids in sequences[:6])
    assert language_model.predicted_tokens(batch) == expected
    summed = language_model.summed_loss(lm.model, batch)
    hf_mean = lm.model(**batch).loss  # transformers' own causal-LM loss: a mean per token
    assert torch.allclose(summed / expected, hf_mean, rtol=1e-5)


def test_accumulating_uneven_micro_batches_follows_the_large_batch(lm):
    sequences = language_model.sequences(lm.tokenizer, 32)[:40]
    large = training.train(lm, sequences, [20], 2, progress=False)
    accumulated = training.train(lm, sequences, [7, 7, 6], 2, progress=False)
    assert accumulated.losses == pytest.approx(large.losses, rel=1e-5)
    # float rounding of the sums, which AdamW's first steps (a step of about lr whatever the
    # gradient's size) carry into the weights: 1e-5 of the largest weight, not more
    assert training.max_weight_difference(large, accumulated) < 1e-4


def test_random_weights_are_said_and_their_loss_starts_near_ln_v(lm):
    assert "random weights" in str(lm) and lm.vocabulary == 1024
    loss = language_model.mean_token_loss(lm, language_model.sequences(lm.tokenizer, 64))
    assert language_model.uniform_loss(lm) == pytest.approx(6.9315, abs=1e-4)
    assert abs(loss - language_model.uniform_loss(lm)) < 0.1


def test_load_names_gpt2_s_fallback_loss_so_it_computes_the_same_loss_without_the_warning(lm):
    """GPT-2's class (``GPT2LMHeadModel``) is in no entry of transformers' loss table, so an
    unnamed model warns "`loss_type=None` ... unrecognized" on its first loss and falls back
    to ``ForCausalLMLoss``. ``load`` names that same function: the same loss to the bit, no
    warning, and ``loss_type`` still None (the HF Trainer's token count reads it: see
    test_the_hf_trainer_divides_gpt2_s_loss_by_every_labelled_token)."""
    from unittest import mock

    from transformers import AutoModelForCausalLM, modeling_utils
    from transformers.loss.loss_utils import LOSS_MAPPING

    plain = AutoModelForCausalLM.from_config(lm.model.config)
    plain.load_state_dict(lm.model.state_dict())
    plain.train(lm.model.training)
    rows = language_model.sequences(lm.tokenizer, 64)[:3]
    batch = language_model.collate(rows, lm.tokenizer.pad_token_id)
    with mock.patch.object(modeling_utils.logger, "warning_once") as warned:
        fallback = plain(**batch).loss
    # the control: without the name, transformers warns (so the check below can fail)
    assert warned.call_count == 1 and "`loss_type=None`" in warned.call_args.args[0]
    with mock.patch.object(modeling_utils.logger, "warning_once") as warned:
        named = lm.model(**batch).loss
    assert not warned.called
    assert torch.equal(named, fallback)
    assert lm.model.loss_type is None and lm.model.loss_function is LOSS_MAPPING["ForCausalLM"]
    # a model whose loss transformers recognises keeps its own
    plain.loss_type = "ForMaskedLM"
    assert language_model.name_default_loss(plain) is plain
    assert plain.loss_function is LOSS_MAPPING["ForMaskedLM"]


def test_a_model_from_a_default_configuration_is_built_offline(monkeypatch):
    """``config:gpt2`` is GPT2Config()'s defaults; building its 124 M parameters costs
    seconds, so a small configuration stands in for the defaults here."""
    import transformers

    made = []

    def small(model_type):
        made.append(model_type)
        return transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=2048)

    monkeypatch.setattr(transformers.AutoConfig, "for_model", small)
    built = language_model.load("config:gpt2", torch.device("cpu"), seed=3)
    assert made == ["gpt2"] and built.name == "config:gpt2" and not built.from_hub
    assert built.vocabulary == 2048 and len(built.tokenizer) == 1024
    assert "random weights" in str(built) and "the tokenizer uses 1,024 of them" in str(built)
    assert built.model.config.eos_token_id == built.tokenizer.eos_token_id
    assert all(not m.p for m in built.model.modules() if isinstance(m, torch.nn.Dropout))
    assert built.model.loss_type is None and "_loss_function" in vars(built.model)  # named
    again = language_model.load("config:gpt2", torch.device("cpu"), seed=3)
    assert torch.equal(built.model.transformer.wte.weight, again.model.transformer.wte.weight)
    for bad in ("config:llama", "config:", "config:nope"):
        with pytest.raises(ParameterError, match="config:gpt2"):
            language_model.load(bad, torch.device("cpu"))
    assert made == ["gpt2", "gpt2"]  # refused before any configuration was built


@pytest.mark.parametrize(
    ("capability", "native"), [((7, 5), False), ((7, 0), False), ((8, 0), True), ((9, 0), True)]
)
def test_bf16_is_chosen_only_where_the_gpu_computes_in_it(monkeypatch, capability, native):
    """A T4 (7.5) emulates bf16 and torch.cuda.is_bf16_supported() says yes there: the
    recipes of modules 5 and 7 must still take float32 and fp16 + GradScaler on it."""
    from coursekit import recipe
    from coursekit.mixed_precision import half_precision, has_native_bf16

    asked = []

    def capability_of(device=None):
        asked.append(device)
        return capability

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # emulation
    monkeypatch.setattr(torch.cuda, "get_device_capability", capability_of)
    monkeypatch.setattr(torch.version, "hip", None)
    assert has_native_bf16("cuda:1") is native
    assert asked == [torch.device("cuda:1")]  # that card's capability, not the current one's
    assert half_precision("cuda") == ("bf16" if native else "fp16")
    assert recipe.autocast_dtype("cuda") is (torch.bfloat16 if native else None)
    assert not has_native_bf16("cpu") and recipe.autocast_dtype("cpu") is torch.bfloat16


def test_lightning_older_than_module_7_needs_is_named(monkeypatch):
    import importlib.metadata

    from coursekit.frameworks import missing

    if missing("lightning"):
        pytest.skip(missing("lightning"))
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.5.5")
    told = missing("lightning", at_least="2.6")
    assert "2.6 or newer; 2.5.5 is installed" in told and "coursekit[frameworks]" in told
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.6.0rc1")
    assert missing("lightning", at_least="2.6") is None
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.10.1")
    assert missing("lightning", at_least="2.6") is None


def test_a_probe_lets_its_copy_of_the_model_go_when_closed(lm):
    import weakref

    with memory.probe(lm, "fp32", 16) as try_step:
        copy = weakref.ref(try_step.model)
        assert try_step(2) > memory.static_bytes(lm.model) > 0
        assert copy() is not lm.model
    assert copy() is None  # the with block's end freed the copy
    with pytest.raises(RuntimeError, match="closed"):
        try_step(2)


def test_the_modes_combine_and_bad_ones_are_named(lm):
    assert memory.parts_of("checkpointing+bf16+lora") == {"checkpointing", "bf16", "lora"}
    for bad in ("fp8", "fp16+bf16", ""):
        with pytest.raises(ValueError, match="mode must be"):
            memory.parts_of(bad)
    lora = memory.with_mode(lm, "lora")
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert 0 < trainable < lm.parameters / 10
    assert all(p.requires_grad for p in lm.model.parameters())  # the original is untouched


def test_the_sweep_grows_with_the_micro_batch_and_makes_a_card(lm):
    rows = memory.sweep(lm, [2, 4], [32], ["fp32", "checkpointing"], progress=False)
    peak = {(r.mode, r.micro_batch): r.peak_bytes for r in rows}
    assert peak["fp32", 4] > peak["fp32", 2] and peak["checkpointing", 4] < peak["fp32", 4]
    assert all(r.estimate_bytes and r.tokens_per_second > 0 for r in rows)
    device = memory.simulated_card(rows, "fp32", 32, capacity_gb=1.0)
    assert device.needs(4) == peak["fp32", 4] and device.needs(2) == peak["fp32", 2]


@pytest.mark.frameworks
@pytest.mark.slow  # imports transformers' Trainer and Accelerate: seconds
def test_the_hf_trainer_divides_gpt2_s_loss_by_every_labelled_token(lm):
    """The claim of module 7's cell m07-25, measured: transformers' Trainer counts the first
    label of each sequence too for GPT-2 (its class is not named ...ForCausalLM)."""
    pytest.importorskip("transformers")
    sequences = language_model.sequences(lm.tokenizer, 32)[:16]
    ours = training.train(lm, sequences, [4, 4], 1, progress=False)
    trainer = training.with_hf_trainer(lm, sequences, 4, 2, 1)
    window = training.windows(sequences, [4, 4], 1)[0]
    batches = [language_model.collate(rows, lm.tokenizer.pad_token_id) for rows in window]
    predicted = sum(language_model.predicted_tokens(b) for b in batches)
    labelled = sum(int((b["labels"] != -100).sum()) for b in batches)
    assert labelled == predicted + len(sequences[:8])
    assert trainer.losses[0] / ours.losses[0] == pytest.approx(predicted / labelled, rel=1e-4)
    # the same settings, so the same tokens for the tokens/s that scripts/gpu-check compares
    assert trainer.tokens == ours.tokens == predicted and trainer.name.endswith("fp32)")
    assert trainer.seconds > 0 and ours.seconds > 0


@pytest.mark.frameworks
@pytest.mark.slow
def test_accelerate_s_finder_returns_a_size_at_the_card_s_edge_without_a_margin():
    pytest.importorskip("accelerate")
    from coursekit.real_model.finders import with_accelerate

    device = SimulatedDevice(8 * GIB, GIB, 150 * MIB)  # the card runs out above 47
    found = with_accelerate(device.try_step, starting_batch_size=128)
    assert found.batch_size <= 47 and found.tried[0] == 128
    assert device.needs(found.batch_size) > 0.9 * 8 * GIB  # past our 10% margin


def test_certificates_without_the_instructor_extra_say_what_to_install(
    monkeypatch, capsys, outside_the_course
):
    from coursekit.commands.cli import main

    for name in list(sys.modules):
        if name.startswith(
            ("coursekit.commands.certificate", "coursekit.grading.records.", "cryptography")
        ):
            monkeypatch.delitem(sys.modules, name)
    import coursekit.commands

    monkeypatch.delattr(coursekit.commands, "certificate", raising=False)  # as never imported
    monkeypatch.setitem(sys.modules, "cryptography", None)
    assert main(["verify", "certificate.html"]) == 2
    told = capsys.readouterr().err
    assert "certificates need the cryptography package" in told
    assert 'pip install "coursekit[instructor]"' in told

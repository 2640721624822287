"""A window check's memory test: a model wide enough that activations are what memory holds.

The model's hidden layer is 4,096 wide, followed by three Tanh (each keeps its output for
the backward pass); a window holds 16 micro-batches, and as many rows (samples, or token
positions) as make one hidden activation of the whole window 8 MiB: 256 rows in float64
(micro-batches of 16 samples, or of one 16-token sequence), 512 in float32, 1,024 in
bfloat16; a micro-batch's is 0.5 MiB. Three problems: a regression (16 -> 4,096 -> 1, mean
squared error), a language model (token ids, an embedding of 16, the hidden layer, logits
over 16 tokens; sequences padded) and GradCache's contrastive batch (256 query and key
pairs, a 6 -> 4,096 -> 4 encoder; the question's own right step warms it up). The call runs
in a process of its own (:mod:`coursekit.checks.memory_peak`), after a warm-up that runs
three micro-batches the honest way, and the kernel counts how far its resident size rose
above the warm-up's peak. Measured (the window questions' four problems, idle and beside two
CPU hogs): an honest loop 0.0 to 1.2 MiB, whether or not it keeps a loss, a prediction or a
dozen small tensors from each micro-batch; one backward for the whole window about 22; a
forward on the whole window, on the model or on any copy of it, in a thread or after freeing
blocks the notebook held (none can be given back in the fork), 38 to 40; written by hand, in
place, 23. GradCache's: its right styles 0.1 to 1.9 MiB; a whole-batch gradient made on a
copy 62, every micro-batch's graph kept until one backward 47. The line is one
whole-window activation (8 MiB). About 80 ms a measurement, idle.
Not seen: memory the notebook held and the function writes into (``out=``), or frees into
malloc's heap and allocates again: its pages were resident before the call.

What is read back, the gradient, the weights after a question's step, or the sums a
function returns, is 2 random projections (the whole of any is 70,000 numbers or more; a
wrong one does not match both), drawn from uniform numbers, which cost less than normal
ones.
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn
from torch.nn import functional

from coursekit.checks.memory_peak import measured
from coursekit.checks.question import Failure, relative_gap
from coursekit.checks.side_effects import switches_kept
from coursekit.contrastive import make_pairs
from coursekit.data import make_regression, split_micro_batches
from coursekit.tokens import IGNORE_INDEX, make_token_batches, split_token_batches

IN_FEATURES, HIDDEN = 16, 4096
PAIR_FEATURES, EMBEDDING, TEMPERATURE = 6, 4, 0.1  # the contrastive problem's encoder
SQUASHES = 3  # Tanh layers after the wide one
VOCAB, SEQ_LEN = 16, 16  # the language model's: logits over 16 tokens, sequences of 16
ACCUM_STEPS = 16
WINDOW_ROWS = {"float64": 256, "float32": 512, "bfloat16": 1024}  # 8 MiB of activation
WARM_UP = 3  # micro-batches: after three, an honest loop's allocations come back to the same blocks
PROJECTIONS = 2
# what a right answer may differ from the reference's by, relative, on the projections:
# float64 summed in another order ~1e-14 seen; float32 ~1e-7; the float32 sums of bf16
# gradients, each rounded to bf16 where the loss was divided before or after, ~1e-3
TOLERANCES = {"float64": 1e-9, "float32": 1e-5, "bfloat16": 2e-2}
# The verdict's line, in whole-window activations (8 MiB): any forward on the whole window
# has two of them alive at once, or one and its gradient; an honest loop rises 0.8 at most.
LINE = 1.0


def memory_spec(
    seed: int,
    reads: str = "grad",
    problem: str = "regression",
    dtype: str = "float64",
) -> dict:
    """The hidden spec a window question adds for its memory test. ``reads``: what the test
    compares with the reference's: the gradient (``"grad"``), the weights after the step
    (``"weights"``, for a function that steps the optimizer) or what the function returns
    (``"returned"``: a tensor per parameter). ``problem``: ``"regression"`` (the function is
    handed a loss function and ``(inputs, targets)`` micro-batches), ``"tokens"`` (padded
    ``(inputs, labels)`` sequences) or ``"pairs"`` (an encoder of :data:`PAIR_FEATURES`
    inputs and ``(queries, keys)`` micro-batches of a contrastive batch: GradCache's)."""
    if problem not in ("regression", "tokens", "pairs") or dtype not in WINDOW_ROWS:
        raise ValueError(f"no memory test for a {problem} problem in {dtype}")
    if reads not in ("grad", "weights", "returned"):
        raise ValueError(
            f"a memory test reads the grad, the weights or what is returned, not {reads}"
        )
    rows = WINDOW_ROWS[dtype] // ACCUM_STEPS
    seq_len = SEQ_LEN if problem == "tokens" else 1
    return {
        "seed": seed,
        "accum_steps": ACCUM_STEPS,
        "micro_batch_size": rows // seq_len,  # samples, or sequences
        "seq_len": seq_len,
        "dtype": dtype,
        "problem": problem,
        "memory": True,
        "reads": reads,
    }


def is_memory_spec(spec: dict) -> bool:
    return bool(spec.get("memory"))


def _dtype(spec: dict) -> torch.dtype:
    return getattr(torch, spec.get("dtype", "float64"))


def _initialised(model: nn.Module, generator: torch.Generator) -> None:
    with torch.no_grad():
        for parameter in model.parameters():
            bound = 1 / parameter.shape[-1] ** 0.5
            parameter.copy_(torch.rand(parameter.shape, generator=generator) * 2 * bound - bound)


def _squashes() -> list[nn.Module]:
    """Three Tanh in a row: each keeps its output for the backward pass, so a whole window's
    forward keeps three activations of the window where an honest loop keeps a micro-batch's,
    while what an honest loop strands in malloc's heap does not grow with them."""
    return [nn.Tanh() for _ in range(SQUASHES)]


def wide_problem(spec: dict) -> tuple[nn.Module, list]:
    """The wide model and the window's micro-batches for ``spec``."""
    generator = torch.Generator().manual_seed(spec["seed"])
    dtype, size = _dtype(spec), spec["micro_batch_size"] * spec["accum_steps"]
    if spec.get("problem") == "tokens":
        model = nn.Sequential(
            nn.Embedding(VOCAB, IN_FEATURES),
            nn.Linear(IN_FEATURES, HIDDEN),
            *_squashes(),
            nn.Linear(HIDDEN, VOCAB),
        )
        _initialised(model, generator)
        inputs, labels = make_token_batches(size, spec["seq_len"], VOCAB, 0.5, seed=spec["seed"])
        sizes = [spec["micro_batch_size"]] * spec["accum_steps"]
        return model.to(dtype), split_token_batches(inputs, labels, sizes)
    if spec.get("problem") == "pairs":
        model = nn.Sequential(
            nn.Linear(PAIR_FEATURES, HIDDEN), *_squashes(), nn.Linear(HIDDEN, EMBEDDING)
        )
        _initialised(model, generator)
        queries, keys = make_pairs(size, in_features=PAIR_FEATURES, seed=spec["seed"], dtype=dtype)
        micro = spec["micro_batch_size"]
        return model.to(dtype), list(zip(queries.split(micro), keys.split(micro), strict=True))
    model = nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), *_squashes(), nn.Linear(HIDDEN, 1))
    _initialised(model, generator)
    inputs, targets = make_regression(size, in_features=IN_FEATURES, seed=spec["seed"])
    batches = split_micro_batches(inputs.to(dtype), targets.to(dtype), spec["micro_batch_size"])
    return model.to(dtype), batches


def window_bytes(spec: dict) -> int:
    """One hidden activation of the whole window, in bytes."""
    rows = spec["micro_batch_size"] * spec["accum_steps"] * spec.get("seq_len", 1)
    return rows * HIDDEN * _dtype(spec).itemsize


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The summed cross-entropy over real tokens (padding skipped), in float32 or wider."""
    logits = logits.flatten(0, 1)
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()
    return functional.cross_entropy(
        logits, labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
    )


def _no_loss_function(spec: dict) -> bool:
    """Whether the function is handed no loss function (it computes its own)."""
    return spec.get("problem") in ("tokens", "pairs")


def _honest_warm_up(spec: dict, model: nn.Module, loss_fn, micro_batches) -> None:
    if spec.get("problem") == "pairs":
        raise ValueError("a contrastive memory test is warmed up by its question's own answer")
    if spec.get("problem") == "tokens":
        tokens = sum(int((labels != IGNORE_INDEX).sum()) for _, labels in micro_batches)
        for inputs, labels in micro_batches:
            (token_loss_sum(model(inputs), labels) / max(tokens, 1)).backward()
        return
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()


def run_measured(spec: dict, call, warm_up_with=None) -> dict:
    """``call(model, loss_fn, micro_batches)`` (the student's function, however a question
    calls it: one that steps is handed its optimizer by the question; one on tokens ignores
    ``loss_fn``, which is None) on the wide problem, measured; outputs: the projections of
    what the spec reads, and the memory (see :func:`coursekit.checks.memory_peak.measured`).
    ``warm_up_with``: a right answer of the question's (written in its check, not
    coursekit's own, which the grader's tripwire watches), called as ``call`` is, on the
    first micro-batches before the measure, so that what an honest call first uses (an
    optimizer's step, a scaler's, a module torch imports on first use) is in place; without
    it, a plain accumulation loop. The grader's runner makes the same two steps, :func:`prime`
    and :func:`measurement`, itself (``runner.py``)."""
    prime(spec, call)
    return measured(*measurement(spec, call, warm_up_with))


def prime(spec: dict, call) -> None:
    """``call`` once, in this process, on a problem of the spec's kind and size but of
    another seed, drawn now: what a function's first run sets up is then in place before
    the measured fork (:func:`_prime`), and nothing it sees tells it the measured problem,
    which is made only in the fork (:func:`measurement`). A function that found the measured
    problem here could compute the window in this process, where memory is not counted,
    and hand the fork its result."""
    decoy = {**spec, "seed": int.from_bytes(os.urandom(4), "little") % 10**6}
    _prime(decoy, call, None if _no_loss_function(spec) else nn.MSELoss())


def measurement(spec: dict, call, warm_up_with=None) -> tuple:
    """``(call_and_read, warm_up)`` for :func:`coursekit.checks.memory_peak.measured`: the
    wide problem is made by the warm-up, in the fork, so that this process never holds it."""
    made: list = []

    def problem() -> tuple:
        if not made:
            model, micro_batches = wide_problem(spec)
            loss_fn = None if _no_loss_function(spec) else nn.MSELoss()
            made.append((model, loss_fn, micro_batches))
        return made[0]

    def warm_up() -> None:
        model, loss_fn, micro_batches = problem()
        if warm_up_with is not None:
            warm_up_with(model, loss_fn, micro_batches[:WARM_UP])
        else:
            _honest_warm_up(spec, model, loss_fn, micro_batches[:WARM_UP])
        model.zero_grad(set_to_none=True)

    def call_and_read() -> dict:
        # the largest forward the model saw and the autograd passes that reached its last
        # bias: only to name the mistake (a whole-batch forward, one backward for the
        # window, gradients cleared); the verdict is the kernel's peak alone
        model, loss_fn, micro_batches = problem()
        passes, largest = [], [0]
        list(model.parameters())[-1].register_hook(lambda grad: passes.append(1))
        model.register_forward_pre_hook(
            lambda module, args: largest.append(max(largest.pop(), len(args[0])))
        )
        returned = call(model, loss_fn, micro_batches)
        reads = spec.get("reads", "grad")
        if reads == "returned":
            read = projection(model, spec["seed"], reads, returned=returned)
        else:
            read = projection(model, spec["seed"], reads)
        return {"grad_projection": read, "passes": len(passes), "largest_forward": largest[0]}

    return call_and_read, warm_up


def _prime(spec: dict, call, loss_fn) -> None:
    """``call`` once on two micro-batches of a model of its own, in this process, before the
    fork: what its first run does once (torch imports sympy for an explicit gradient given to
    ``backward``, ``torch._dynamo`` for a non-reentrant checkpoint: 30 to 40 MiB; oneDNN
    builds kernels for a dtype) is then the fork's before it starts, not counted as the
    call's. The function's hidden tests on small models came first, but may have run
    another path. Its failure here is the measured call's to report."""
    threads = _threads()
    model, micro_batches = wide_problem(spec)
    try:
        with switches_kept():  # grad mode and default dtype back as they were
            call(model, loss_fn, micro_batches[:2])
    except Exception:  # noqa: BLE001 - the measured call meets it again, and reports it
        pass
    # a thread it started may still be ending (Python's join returns first): a fork taken
    # meanwhile could inherit a lock that thread held, and wait on it for ever. Wait until
    # no thread is ending: the threads are the ones before, or have stayed the same for
    # 5 ms (a pool torch started stays), and at most 2 s.
    deadline, seen = time.monotonic() + 2.0, _threads()
    while seen - threads and time.monotonic() < deadline:
        time.sleep(0.005)
        now = _threads()
        if now == seen:
            break
        seen = now


def _threads() -> frozenset:
    """This process's threads, as the kernel lists them."""
    try:
        return frozenset(os.listdir(f"/proc/{os.getpid()}/task"))
    except OSError:
        return frozenset()


def _returned_tensors(returned, parameters) -> list | str:
    """A tensor per parameter, of its shape, as a function that returns sums must give; else
    what was wrong, in words."""
    if not isinstance(returned, list | tuple) or not all(
        isinstance(t, torch.Tensor) for t in returned
    ):
        return f"returned {type(returned).__name__}, not a list of tensors"
    shapes = [tuple(t.shape) for t in returned]
    if shapes != [tuple(p.shape) for p in parameters]:
        return f"returned tensors of shapes {shapes}, not one per parameter, of its shape"
    return list(returned)


def projection(
    model: nn.Module, seed: int, reads: str = "grad", returned=None
) -> list[float] | str | None:
    """The gradient (or the weights, or the tensors returned, one per parameter) projected
    on :data:`PROJECTIONS` fixed random directions (uniform in [-0.5, 0.5)), one parameter
    at a time (so that reading it adds no memory of note); None when no gradient exists;
    words when what was returned cannot be read."""
    parameters = list(model.parameters())
    if reads == "returned":
        tensors = _returned_tensors(returned, parameters)
        if isinstance(tensors, str):
            return tensors
    else:
        tensors = [p if reads == "weights" else p.grad for p in parameters]
    if all(t is None for t in tensors):
        return None
    generator = torch.Generator().manual_seed(seed + 1)
    totals = [0.0] * PROJECTIONS
    for parameter, tensor in zip(parameters, tensors, strict=True):
        for k in range(PROJECTIONS):
            direction = torch.rand(parameter.shape, generator=generator, dtype=torch.float64)
            direction -= 0.5
            if tensor is not None:
                totals[k] += float((tensor.detach().double() * direction).sum())
    return totals


def in_mib(size: float) -> str:
    return f"{size / 2**20:.0f} MiB" if size >= 2**20 * 10 else f"{size / 2**20:.1f} MiB"


def memory_setting(spec: dict) -> str:
    n, size, dtype = spec["accum_steps"], spec["micro_batch_size"], spec.get("dtype", "float64")
    if spec.get("problem") == "pairs":
        model = f"a {PAIR_FEATURES} -> {HIDDEN:,} -> {EMBEDDING} encoder in {dtype}"
        batches = f"{n * size} pairs in micro-batches of {size}"
    elif spec.get("problem") == "tokens":
        model = f"a language model with a {HIDDEN:,}-wide hidden layer in {dtype}"
        batches = f"{n} micro-batches of {size} padded sequence{'s' if size > 1 else ''}"
    else:
        model = f"a {IN_FEATURES} -> {HIDDEN:,} -> 1 model in {dtype}"
        batches = f"{n} micro-batches of {size}"
    return f"(the memory test: {model}, {batches})"


def judge_memory(spec: dict, outputs: dict, expected: dict) -> None:
    """The memory test's verdict: the function's error, its peak, then its gradient."""
    setting = memory_setting(spec)
    if isinstance(outputs.get("error"), str):
        raise Failure(f"{outputs['error']} {setting}")
    if isinstance(outputs.get("died"), str):
        raise Failure(f"Your function's process was {outputs['died']} {setting}.")
    window = window_bytes(spec)
    peak = outputs.get("peak_above_warm_up")
    if not isinstance(peak, int | float):
        if outputs.get("memory") != "not measured":
            raise Failure(f"The memory test's measurement is missing {setting}.")
        peak = None
    passes, largest = outputs.get("passes"), outputs.get("largest_forward")
    seen_whole = isinstance(largest, int) and largest > spec["micro_batch_size"]
    if peak is not None and peak > LINE * window and passes == 1 and not seen_whole:
        raise Failure(
            f"Your function needed {in_mib(peak)} of memory beyond what one micro-batch's "
            f"forward and backward take {setting}: one backward() for the whole window keeps every "
            "micro-batch's graph, and its activations, alive until then. Call backward() "
            "once per micro-batch.",
            "single_backward",
        )
    if peak is not None and peak > LINE * window:
        raise Failure(
            f"Your function needed {in_mib(peak)} of memory beyond what one micro-batch's "
            f"forward and backward take {setting}, more than one layer's activations for the "
            f"whole window ({in_mib(window)}): the window's worth of something was alive at "
            "once. Most often a forward pass on the whole window (on the model or on a copy) "
            "or every micro-batch's graph kept until one backward(); a copy of the gradient "
            "kept for each micro-batch costs as much. Run the forward and backward pass on one "
            "micro-batch at a time, letting backward() add each micro-batch's gradient into "
            ".grad.",
            "whole_batch_forward",
        )
    actual, wanted = outputs.get("grad_projection"), expected.get("grad_projection")
    reads = spec.get("reads", "grad")
    what = {"weights": "weights after the step", "returned": "returned sums"}.get(reads, "gradient")
    if isinstance(actual, str) and reads == "returned":
        raise Failure(f"Your function {actual} {setting}.")
    if actual is None and isinstance(passes, int) and passes > 0 and reads != "returned":
        raise Failure(
            f"backward() ran, but no gradient was left in .grad afterwards {setting}: "
            "something cleared the gradients at the end. Leave them for the optimizer step.",
            "gradients_cleared",
        )
    if actual is None:
        raise Failure(f"No parameter has a gradient after your function {setting}.", "no_backward")
    if not isinstance(actual, list) or not all(isinstance(v, int | float) for v in actual):
        raise Failure(f"The memory test's {what} could not be read {setting}.")
    gap = relative_gap([float(v) for v in actual], wanted)
    if gap > TOLERANCES[spec.get("dtype", "float64")]:
        raise Failure(
            f"Your {what} differ{'s' if what == 'gradient' else ''} from the reference's "
            f"by {gap:.2e} (relative, on {PROJECTIONS} random projections) {setting}."
        )

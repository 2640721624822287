"""Module 6 hand-ins for scaled_hyperparameters and ramp_plan: right answers, written several
ways, and each known mistake."""

_HYPER = """
import math
import numpy as np

def scaled_hyperparameters(base_lr, base_batch, new_batch, optimizer_kind, warmup_steps,
                           betas=(0.9, 0.999), eps=1e-8, weight_decay=None):
{checks}
    if weight_decay is not None and weight_decay < 0:
        raise ValueError("weight_decay must be 0 or more")
    k = {k}
    warmup = {warmup}
    extra = {{}} if weight_decay is None else {{"weight_decay": {decay}}}
    if optimizer_kind == "sgd":
        return {{"lr": {sgd_lr}, "warmup_steps": warmup, **extra}}
{beta_check}
    return {{
        "lr": {adam_lr},
        "warmup_steps": warmup,
        "betas": {betas},
        "eps": {eps},
        **extra,
    }}
"""

_BATCH_CHECK = """
    if base_batch < 1 or new_batch < 1:
        raise ValueError("base_batch and new_batch must be at least 1")"""
_KIND_CHECK = """
    if optimizer_kind not in ("sgd", "adam", "adamw"):
        raise ValueError(f"optimizer_kind must be sgd, adam or adamw, not {optimizer_kind!r}")"""
_CHECKS = (
    _BATCH_CHECK
    + """
    if base_lr <= 0:
        raise ValueError("base_lr must be above 0")
    if warmup_steps < 0:
        raise ValueError("warmup_steps must be 0 or more")"""
    + _KIND_CHECK
)

_BETA_CHECK = """
    if any(new_batch / base_batch * (1 - beta) > 1 for beta in betas):
        raise ValueError("a scaled beta would fall below 0: the rule does not apply that far")
"""


def _hyper(
    checks=_CHECKS,
    k="new_batch / base_batch",
    warmup="-(-warmup_steps * base_batch // new_batch)",
    sgd_lr="base_lr * k",
    beta_check=_BETA_CHECK,
    adam_lr="base_lr * math.sqrt(k)",
    betas="[1 - k * (1 - beta) for beta in betas]",
    eps="eps / math.sqrt(k)",
    decay="weight_decay * (math.sqrt(k) if optimizer_kind == 'adamw' else 1)",
):
    return _HYPER.format(
        decay=decay,
        checks=checks,
        k=k,
        warmup=warmup,
        sgd_lr=sgd_lr,
        beta_check=beta_check,
        adam_lr=adam_lr,
        betas=betas,
        eps=eps,
    )


SCALED_HYPERPARAMETERS = {
    "correct": _hyper(),
    # exact ratios: a Fraction k, a Fraction ceiling; the lr comes back a float, the betas too
    "correct_fractions": """
import math
from fractions import Fraction

def scaled_hyperparameters(base_lr, base_batch, new_batch, optimizer_kind, warmup_steps,
                           betas=(0.9, 0.999), eps=1e-8, weight_decay=None):
    if min(base_batch, new_batch) < 1 or base_lr <= 0 or warmup_steps < 0:
        raise ValueError("batches must be >= 1, base_lr > 0 and warmup_steps >= 0")
    if optimizer_kind not in {"sgd", "adam", "adamw"}:
        raise ValueError("unknown optimizer_kind; use sgd, adam or adamw")
    if weight_decay is not None and weight_decay < 0:
        raise ValueError("a negative weight_decay")
    k = Fraction(new_batch, base_batch)
    warmup = math.ceil(Fraction(warmup_steps * base_batch, new_batch))
    decay = {} if weight_decay is None else {"weight_decay": weight_decay}
    if optimizer_kind == "adamw" and decay:  # decoupled: lr x decay per step
        decay["weight_decay"] = weight_decay * math.sqrt(k)
    if optimizer_kind == "sgd":
        return {"lr": base_lr * k, "warmup_steps": warmup, **decay}
    new_betas = tuple(1 - k * (1 - Fraction(beta)) for beta in betas)
    if min(new_betas) < 0:
        raise ValueError("k(1 - beta) > 1: the square-root rule does not apply that far")
    root = math.sqrt(k)
    return {"lr": base_lr * root, "warmup_steps": warmup,
            "betas": tuple(float(b) for b in new_betas), "eps": eps / root, **decay}
""",
    # NumPy all the way: NumPy floats, a NumPy array of betas, a NumPy integer warm-up
    "correct_numpy": """
import numpy as np

def scaled_hyperparameters(base_lr, base_batch, new_batch, optimizer_kind, warmup_steps,
                           betas=(0.9, 0.999), eps=1e-8, weight_decay=None):
    if base_batch < 1 or new_batch < 1 or base_lr <= 0 or warmup_steps < 0:
        raise ValueError("bad batch, learning rate or warm-up")
    if weight_decay is not None and np.float64(weight_decay) < 0:
        raise ValueError("weight_decay must not be negative")
    kinds = {"sgd": 1.0, "adam": 0.5, "adamw": 0.5}  # the power of k the lr takes
    if optimizer_kind not in kinds:
        raise ValueError(f"optimizer_kind must be one of {sorted(kinds)}")
    k = np.float64(new_batch) / np.float64(base_batch)
    warmup = -(-np.int64(warmup_steps) * np.int64(base_batch) // np.int64(new_batch))
    lr = base_lr * k ** kinds[optimizer_kind]
    out = {"lr": lr, "warmup_steps": warmup}
    if weight_decay is not None:
        out["weight_decay"] = weight_decay * np.sqrt(k) ** (optimizer_kind == "adamw")
    if optimizer_kind == "sgd":
        return out
    new_betas = 1 - k * (1 - np.asarray(betas, dtype=np.float64))
    if (new_betas < 0).any():
        raise ValueError("a scaled beta would be negative")
    return {**out, "betas": new_betas, "eps": eps / np.sqrt(k)}
""",
    # a power for the root, divmod for the ceiling, checks written as a table
    "correct_divmod": """
def scaled_hyperparameters(base_lr, base_batch, new_batch, optimizer_kind, warmup_steps,
                           betas=(0.9, 0.999), eps=1e-8, weight_decay=None):
    problems = {
        "weight_decay must not be negative": weight_decay is not None and weight_decay < 0,
        "base_batch must be at least 1": base_batch < 1,
        "new_batch must be at least 1": new_batch < 1,
        "base_lr must be above 0": base_lr <= 0,
        "warmup_steps must not be negative": warmup_steps < 0,
        "optimizer_kind must be sgd, adam or adamw": optimizer_kind not in ("sgd", "adam", "adamw"),
    }
    for problem, found in problems.items():
        if found:
            raise ValueError(problem)
    k = new_batch / base_batch
    steps, rest = divmod(warmup_steps * base_batch, new_batch)
    result = {"warmup_steps": steps + (rest > 0)}
    if weight_decay is not None:
        result["weight_decay"] = weight_decay * (k**0.5 if optimizer_kind == "adamw" else 1)
    if optimizer_kind == "sgd":
        result["lr"] = base_lr * k
        return result
    shrink = [k * (1 - beta) for beta in betas]
    if max(shrink) > 1:
        raise ValueError("k(1 - beta) > 1: the rule does not reach that far")
    result.update(lr=base_lr * k**0.5, betas=(1 - shrink[0], 1 - shrink[1]), eps=eps / k**0.5)
    return result
""",
    "linear_for_adam": _hyper(adam_lr="base_lr * k"),
    "sqrt_for_sgd": _hyper(sgd_lr="base_lr * math.sqrt(k)"),
    "ratio_inverted": _hyper(k="base_batch / new_batch"),
    "ratio_truncated": _hyper(k="new_batch // base_batch"),
    "lr_not_scaled": _hyper(sgd_lr="base_lr", adam_lr="base_lr"),
    "warmup_not_rescaled": _hyper(warmup="warmup_steps"),
    "warmup_scaled_up": _hyper(warmup="math.ceil(warmup_steps * k)"),
    "warmup_rounded_down": _hyper(warmup="warmup_steps * base_batch // new_batch"),
    # non-textbook: the ceiling of a float ratio, one step high where the exact one is whole
    "warmup_float_rounding": _hyper(warmup="math.ceil(warmup_steps / k)"),
    # a float warm-up: np.ceil keeps the float type
    "warmup_as_float": _hyper(warmup="np.ceil(warmup_steps * base_batch / new_batch)"),
    "betas_not_scaled": _hyper(betas="list(betas)"),
    "betas_scaled_wrong_way": _hyper(betas="[beta * k for beta in betas]"),
    "betas_divided_by_k": _hyper(betas="[1 - (1 - beta) / k for beta in betas]"),
    # non-textbook: another rule (the same decay per sample), not the one the notebook states
    "betas_as_powers": _hyper(betas="[beta ** k for beta in betas]"),
    "eps_not_scaled": _hyper(eps="eps"),
    "weight_decay_not_scaled": _hyper(decay="weight_decay"),
    # rule 4: SGD's weight decay, given, left out of its dict
    "weight_decay_dropped": _hyper().replace(
        '"warmup_steps": warmup, **extra}', '"warmup_steps": warmup}'
    ),
    # SGD's weight decay scaled as AdamW's is
    "weight_decay_scaled_for_sgd": _hyper(
        decay="weight_decay * (1 if optimizer_kind == 'adam' else math.sqrt(k))"
    ),
    "weight_decay_scaled_by_k": _hyper(
        decay="weight_decay * (k if optimizer_kind == 'adamw' else 1)"
    ),
    # non-textbook: the decoupled rule applied to the loss's L2 term too
    "weight_decay_scaled_in_the_loss": _hyper(decay="weight_decay * math.sqrt(k)"),
    "eps_scaled_wrong_way": _hyper(eps="eps * math.sqrt(k)"),
    # every kind but "sgd" gets Adam's rule: "rmsprop" is not refused
    # every kind but "sgd" gets Adam's rule: "rmsprop" is not refused
    "bad_input_accepted": _hyper(checks=_CHECKS.replace(_KIND_CHECK, "")),
    "wrong_exception": _hyper(
        checks=_CHECKS.replace(
            _KIND_CHECK, '\n    assert optimizer_kind in ("sgd", "adam", "adamw"), optimizer_kind'
        )
    ),
    # non-textbook: no check on the batches; 0 divides by zero, a negative one goes through
    "batch_not_checked": _hyper(checks=_CHECKS.replace(_BATCH_CHECK, "")),
    "beta_range_not_checked": _hyper(beta_check=""),
    # non-textbook: only beta1 is checked; a beta2 scaled below 0 goes through
    "only_beta1_checked": _hyper(
        beta_check=_BETA_CHECK.replace("for beta in betas", "for beta in betas[:1]")
    ),
    # the betas neither scaled nor checked: the unscaled betas are what the refusals show too
    "betas_not_scaled_nor_checked": _hyper(betas="list(betas)", beta_check=""),
    # k(1 - beta) = 1 gives beta = 0, still in [0, 1): refusing it is one step too strict
    "beta_zero_refused": _hyper(beta_check=_BETA_CHECK.replace("> 1", ">= 1")),
}

_RAMP_CHECKS = """
    if micro_batch_size < 1 or total_samples < 1:
        raise ValueError("micro_batch_size and total_samples must be at least 1")
    if not schedule or schedule[0][0] != 0:
        raise ValueError("the schedule needs a first pair at sample 0")
    if any(after[0] <= before[0] for before, after in zip(schedule, schedule[1:])):
        raise ValueError("sort the schedule by from_sample, without repeats")
    if any(accum < 1 for _, accum in schedule):
        raise ValueError("accum_steps must be at least 1")
"""

_RAMP = """
def ramp_plan(total_samples, micro_batch_size, schedule):
{checks}
    windows, scales, start = [], [], 0
    while start < total_samples:
        accum = {accum}
        window = []
        while len(window) < accum and start < {end}:
            stop = min(start + micro_batch_size, total_samples)
            window.append([start, stop])
            start = stop
        if not window:
            break
        size = window[-1][1] - window[0][0]
        windows.append(window)
        scales.append({scales})
    return {{"windows": windows, "scales": scales, "optimizer_steps": {steps}}}
"""


def _ramp(
    checks=_RAMP_CHECKS,
    accum="[n for f, n in schedule if f <= start][-1]",
    end="total_samples",
    scales="[(b - a) / size for a, b in window]",
    steps="len(windows)",
):
    return _RAMP.format(checks=checks, accum=accum, end=end, scales=scales, steps=steps)


# Phase by phase: each phase's windows from its own from_sample ({start}) up to the next one
_BY_PHASE = """
def ramp_plan(total_samples, micro_batch_size, schedule):
{checks}
    ends = [f for f, _ in schedule[1:]] + [total_samples]
    windows, start = [], 0
    for (from_sample, accum), end in zip(schedule, ends):
        end = min(end, total_samples)
        start = {start}
        while start < end:
            window_end = start + accum * micro_batch_size
            {cross}
            last = min(window_end, total_samples)
            window = [[a, min(a + micro_batch_size, last)]
                      for a in range(start, last, micro_batch_size)]
            windows.append(window)
            start = window[-1][1]
    scales = [[(b - a) / (w[-1][1] - w[0][0]) for a, b in w] for w in windows]
    return {{"windows": windows, "scales": scales, "optimizer_steps": len(windows)}}
"""


def _by_phase(start, cross):
    return _BY_PHASE.format(checks=_RAMP_CHECKS, start=start, cross=cross)


RAMP_PLAN = {
    "correct": _ramp(),
    # a generator of windows, the lookup by bisect, the scales as Fractions
    "correct_generator": """
import bisect
from fractions import Fraction

def _windows(total_samples, micro_batch_size, schedule):
    starts = [f for f, _ in schedule]
    start = 0
    while start < total_samples:
        accum = schedule[bisect.bisect_right(starts, start) - 1][1]
        stops = [min(start + (i + 1) * micro_batch_size, total_samples) for i in range(accum)]
        edges = sorted({start, *stops})
        yield [(a, b) for a, b in zip(edges, edges[1:])]
        start = edges[-1]

def ramp_plan(total_samples, micro_batch_size, schedule):
    if total_samples < 1 or micro_batch_size < 1:
        raise ValueError("need at least one sample and one sample per micro-batch")
    if not schedule or schedule[0][0] != 0 or min(n for _, n in schedule) < 1:
        raise ValueError("the schedule must start at sample 0 with accum_steps >= 1")
    if sorted({f for f, _ in schedule}) != [f for f, _ in schedule]:
        raise ValueError("the schedule must be sorted, without repeats")
    windows = list(_windows(total_samples, micro_batch_size, schedule))
    scales = [[Fraction(b - a, w[-1][1] - w[0][0]) for a, b in w] for w in windows]
    return {"windows": windows, "scales": scales, "optimizer_steps": len(windows)}
""",
    # NumPy: the micro-batch grid first, searchsorted for the phase, NumPy numbers out
    "correct_numpy": """
import numpy as np

def ramp_plan(total_samples, micro_batch_size, schedule):
    if total_samples < 1 or micro_batch_size < 1:
        raise ValueError("total_samples and micro_batch_size must be at least 1")
    table = np.array(schedule, dtype=np.int64).reshape(-1, 2)
    if len(table) == 0 or table[0, 0] != 0:
        raise ValueError("the schedule must begin at sample 0")
    if (np.diff(table[:, 0]) <= 0).any() or (table[:, 1] < 1).any():
        raise ValueError("from_samples must increase and accum_steps be >= 1")
    starts = np.arange(0, total_samples, micro_batch_size)
    stops = np.minimum(starts + micro_batch_size, total_samples)
    windows, scales, i = [], [], 0
    while i < len(starts):
        accum = table[np.searchsorted(table[:, 0], starts[i], side="right") - 1, 1]
        a, b = starts[i : i + accum], stops[i : i + accum]
        windows.append(np.stack([a, b], axis=1))
        scales.append((b - a) / (b[-1] - a[0]))
        i += accum
    return {"windows": windows, "scales": scales, "optimizer_steps": np.int64(len(windows))}
""",
    # micro-batches listed first, then grouped; the phase read from a dict
    "correct_grouping": """
def ramp_plan(total_samples, micro_batch_size, schedule):
    if micro_batch_size <= 0 or total_samples <= 0:
        raise ValueError("micro_batch_size and total_samples must be positive")
    accum_from = dict(schedule)
    if not schedule or 0 not in accum_from or len(accum_from) != len(schedule):
        raise ValueError("the schedule must start at 0 and list each from_sample once")
    if list(accum_from) != sorted(accum_from) or schedule[0][0] != 0:
        raise ValueError("the schedule must be sorted by from_sample")
    if any(n <= 0 for n in accum_from.values()):
        raise ValueError("accum_steps must be positive")
    micro = [[a, min(a + micro_batch_size, total_samples)]
             for a in range(0, total_samples, micro_batch_size)]
    windows, i = [], 0
    while i < len(micro):
        accum = accum_from[max(f for f in accum_from if f <= micro[i][0])]
        windows.append(micro[i : i + accum])
        i += accum
    scales = []
    for window in windows:
        samples = sum(b - a for a, b in window)
        scales.append([(b - a) / samples for a, b in window])
    return {"windows": windows, "scales": scales, "optimizer_steps": len(windows)}
""",
    # the schedule popped, from a copy of its own: the caller's list is left alone
    "correct_popping_a_copy": _ramp(
        checks=_RAMP_CHECKS + "    pending = list(schedule)\n",
        accum="pending[0][1]\n"
        "        while len(pending) > 1 and pending[1][0] <= start:\n"
        "            pending.pop(0)\n"
        "            accum = pending[0][1]",
    ),
    "scheduler_in_micro_steps": _ramp(steps="sum(len(w) for w in windows)"),
    "scheduler_length_from_first_batch": _ramp(
        steps="-(-(-(-total_samples // micro_batch_size)) // schedule[0][1])"
    ),
    # sized as if the batch had been the final one all along (the notebook's mistaken run)
    "scheduler_length_from_final_batch": _ramp(
        steps="-(-total_samples // (micro_batch_size * [n for f, n in schedule"
        " if f < total_samples][-1]))"
    ),
    "loss_scale_not_updated": _ramp(scales="[1 / schedule[0][1]] * len(window)"),
    "last_window_scaled_by_n": _ramp(scales="[1 / accum] * len(window)"),
    "short_micro_batch_weighted_as_full": _ramp(scales="[1 / len(window)] * len(window)"),
    # only whole micro-batches: the short one at the end is never trained on
    "samples_dropped": _ramp(end="total_samples // micro_batch_size * micro_batch_size"),
    # non-textbook: only full windows are kept; a short last window is never trained on
    "short_window_dropped": _ramp(
        accum="[n for f, n in schedule if f <= start][-1]\n"
        "        if start + accum * micro_batch_size > total_samples:\n"
        "            accum = 0"
    ),
    # non-textbook: accum_steps looked up at the end of the window's first micro-batch
    "phase_change_early": _ramp(
        accum="[n for f, n in schedule if f < start + micro_batch_size][-1]"
    ),
    "phase_change_late": _ramp(
        accum="([n for f, n in schedule if f < start] or [schedule[0][1]])[-1]"
    ),
    # non-textbook: accum_steps looked up when the previous window started
    "accum_looked_up_after_window": _ramp(
        accum="[n for f, n in schedule if f <= (windows[-1][0][0] if windows else 0)][-1]"
    ),
    "schedule_ignored": _ramp(accum="schedule[0][1]"),
    # from_sample compared with the count of micro-batches so far, not of samples
    "schedule_in_micro_batches": _ramp(
        accum="[n for f, n in schedule if f <= start // micro_batch_size][-1]"
    ),
    # the schedule read by popping its pairs off the caller's list
    "schedule_popped": _ramp(
        accum="schedule[0][1]\n"
        "        while len(schedule) > 1 and schedule[1][0] <= start:\n"
        "            schedule.pop(0)\n"
        "            accum = schedule[0][1]"
    ),
    # the window's length looked up at every micro-batch: it changes in the window's middle
    "window_split_at_change": f"""
def ramp_plan(total_samples, micro_batch_size, schedule):
{_RAMP_CHECKS}
    windows, window = [], []
    for start in range(0, total_samples, micro_batch_size):
        window.append([start, min(start + micro_batch_size, total_samples)])
        if len(window) >= [n for f, n in schedule if f <= start][-1]:
            windows.append(window)
            window = []
    if window:
        windows.append(window)
    scales = [[(b - a) / (w[-1][1] - w[0][0]) for a, b in w] for w in windows]
    return {{"windows": windows, "scales": scales, "optimizer_steps": len(windows)}}
""",
    # each phase on its own: micro-batches and windows cut at from_sample
    "window_cut_at_from_sample": _by_phase(
        start="from_sample", cross="window_end = min(window_end, end)"
    ),
    # each phase's windows must fit before the next from_sample; then a jump to it
    "samples_skipped": _by_phase(
        start="max(start, from_sample)",
        cross="if window_end > end and end < total_samples:\n                break",
    ),
    # each phase restarts at its from_sample, though the last window ran past it
    "samples_repeated": _by_phase(start="from_sample", cross=""),
    # non-textbook: a window ends when a run-wide micro-batch counter hits a multiple of N
    "boundary_by_global_count": f"""
def ramp_plan(total_samples, micro_batch_size, schedule):
{_RAMP_CHECKS}
    windows, window = [], []
    for i, start in enumerate(range(0, total_samples, micro_batch_size)):
        window.append([start, min(start + micro_batch_size, total_samples)])
        accum = [n for f, n in schedule if f <= start][-1]
        if (i + 1) % accum == 0:
            windows.append(window)
            window = []
    if window:
        windows.append(window)
    scales = [[(b - a) / (w[-1][1] - w[0][0]) for a, b in w] for w in windows]
    return {{"windows": windows, "scales": scales, "optimizer_steps": len(windows)}}
""",
    # nothing checked: a schedule that starts after 0 still makes a plan
    "schedule_not_checked": _ramp(
        checks="", accum="([n for f, n in schedule if f <= start] or [schedule[0][1]])[-1]"
    ),
    "ramp_wrong_exception": _ramp(
        checks="""
    assert micro_batch_size >= 1 and total_samples >= 1
    assert schedule and schedule[0][0] == 0
    assert all(after[0] > before[0] for before, after in zip(schedule, schedule[1:]))
    assert all(accum >= 1 for _, accum in schedule)
"""
    ),
    # non-textbook: the order is not checked; an unsorted schedule makes a plan
    "unsorted_schedule_accepted": _ramp(
        checks="\n".join(
            line for line in _RAMP_CHECKS.splitlines() if "zip(" not in line and "sort" not in line
        ),
        accum="[n for f, n in sorted(schedule) if f <= start][-1]",
    ),
}

# the windows kept in a default argument: one list for every call, growing
RAMP_PLAN["windows_in_default_argument"] = (
    RAMP_PLAN["correct"]
    .replace(
        "def ramp_plan(total_samples, micro_batch_size, schedule):",
        "def ramp_plan(total_samples, micro_batch_size, schedule, windows=[]):",
    )
    .replace("windows, scales, start = [], [], 0", "scales, start = [], 0")
)
assert "windows=[]" in RAMP_PLAN["windows_in_default_argument"]

BY_QUESTION = {"scaled_hyperparameters": SCALED_HYPERPARAMETERS, "ramp_plan": RAMP_PLAN}

NAMED_AS = {
    "betas_not_scaled_nor_checked": "betas_not_scaled",
    "weight_decay_scaled_for_sgd": "weight_decay_scaled_in_the_loss",
    "schedule_popped": "inputs_changed",
    # in the public specs no later pair is reached when read in micro-batches: its windows
    # are a schedule ignored's, and that message is worded true of both
    "schedule_in_micro_batches": "schedule_ignored",
    "windows_in_default_argument": "state_across_calls",
    "warmup_as_float": "not_an_int",
    "betas_divided_by_k": "betas_scaled_wrong_way",
    "batch_not_checked": "wrong_exception",
    "beta_range_not_checked": "bad_input_accepted",
    "only_beta1_checked": "bad_input_accepted",
    "short_window_dropped": "samples_dropped",
    "accum_looked_up_after_window": "phase_change_late",
    "window_cut_at_from_sample": "window_split_at_change",
    "schedule_not_checked": "bad_input_accepted",
    "ramp_wrong_exception": "wrong_exception",
    "unsorted_schedule_accepted": "bad_input_accepted",
}

_H, _R = "scaled_hyperparameters", "ramp_plan"
NON_TEXTBOOK: set[tuple[str, str]] = {
    (_H, "warmup_float_rounding"),
    (_H, "betas_as_powers"),
    (_H, "batch_not_checked"),
    (_H, "only_beta1_checked"),
    (_R, "short_window_dropped"),
    (_R, "accum_looked_up_after_window"),
    (_R, "boundary_by_global_count"),
    (_R, "unsorted_schedule_accepted"),
    (_R, "phase_change_early"),
    (_H, "betas_not_scaled_nor_checked"),
    (_H, "weight_decay_scaled_in_the_loss"),
    (_R, "schedule_in_micro_batches"),
    (_R, "schedule_popped"),
    (_R, "windows_in_default_argument"),
}
# the public specs pass them: only the grader's fixed hidden specs catch them
HIDDEN_ONLY: set[tuple[str, str]] = {
    (_H, "weight_decay_scaled_in_the_loss"),  # the public specs' weight decay is AdamW's
    (_H, "warmup_float_rounding"),
    (_H, "beta_range_not_checked"),
    (_H, "only_beta1_checked"),
    (_H, "beta_zero_refused"),
}
# no name fits: it raises on a right input, and the verdict reports the exception
UNNAMED: set[tuple[str, str]] = {(_H, "beta_zero_refused")}
ALSO_NAMED: dict[tuple[str, str], set[str]] = {
    # a batch of 0 divides by zero (not a ValueError); a negative one is not refused at all
    (_H, "batch_not_checked"): {"bad_input_accepted"},
    # a micro_batch_size of 0 or an empty schedule raise (not a ValueError) in its loop
    (_R, "schedule_not_checked"): {"wrong_exception"},
    # named so where its windows differ from a schedule ignored (hidden specs)
    (_R, "schedule_in_micro_batches"): {"schedule_in_micro_batches"},
}

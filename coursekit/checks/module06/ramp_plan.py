"""Module 6's question ``ramp_plan``: a batch-size ramp built by changing the accumulation
steps.

The student writes ``ramp_plan(total_samples, micro_batch_size, schedule)``: from a sorted
list of ``(from_sample, accum_steps)`` pairs, the windows of micro-batches (each window keeps
the accum_steps in force at its own first sample), each micro-batch's loss scale (its samples
over its window's) and the number of optimizer steps; bad input is refused with a ValueError.
It is arithmetic, judged exactly against :func:`coursekit.batch_scaling.ramp_plan`: first the
shape of the answer, then the windows (every sample once, in order), the scales, the step
count. A mistake is named only when the hand-in's output equals what a known mistake gives
here, and differs from the right output; where two mistakes give the same output, no name is
given and the message says what differs.

The file is longer than most: the windows, the scales and the step count are one plan, and
their mistakes, the reading of the answer and the judge read best together.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

from coursekit.batch_scaling import ramp_plan
from coursekit.checks.module06.common import (
    MODULE,
    as_number,
    describe,
    is_close,
    is_whole,
    judge_refusal,
    only_name,
    refused,
    show,
)
from coursekit.checks.question import Failure, Question, Rule
from coursekit.checks.registry import register
from coursekit.checks.side_effects import Kept, judge_left_behind, judge_repeated, repeated

MAX_MICRO_BATCHES = 20_000  # read no more of a plan: the specs' plans have a few hundred


def _real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _pair(value) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(is_whole(v) for v in value)


Windows = list[list[list[int]]]

_PLAN_MESSAGES = {
    "samples_skipped": (
        "your plan jumps ahead to the new phase's from_sample, so the samples between the "
        "last window that fit and from_sample are never trained on. Keep going from where the "
        "last window stopped: the change applies to the first window that starts at or after "
        "from_sample"
    ),
    "samples_repeated": (
        "your plan restarts at from_sample although the window before it ran past it, so "
        "those samples are trained on twice. Keep going from where the last window stopped: "
        "the change applies to the first window that starts at or after from_sample"
    ),
    "samples_dropped": (
        "the samples at the end that do not fill a whole micro-batch (or window) are never "
        "trained on. The last micro-batch and the last window may be short: train on them too"
    ),
    "window_split_at_change": (
        "a window changed its number of micro-batches in its middle (or was cut at "
        "from_sample). A window keeps the accum_steps it started with; the change applies to "
        "the first window that starts at or after from_sample"
    ),
    "phase_change_early": (
        "a change took effect one window early: a window that started before from_sample "
        "already used the new accum_steps (it was looked up past the window's start, e.g. at "
        "the end of its first micro-batch). Look it up at the window's own first sample"
    ),
    "phase_change_late": (
        "a change took effect one window late: a window that starts at sample s uses the last "
        "pair with from_sample <= s (so a window starting exactly at from_sample already has "
        "the new accum_steps), looked up at that window's own start"
    ),
    "boundary_by_global_count": (
        "your windows end where a micro-batch counter over the whole run hits a multiple of "
        "accum_steps, (i + 1) % accum_steps == 0. That works only while accum_steps stays the "
        "same: after a change, a window ends wherever the old count happens to meet a "
        "multiple of the new one. Count the micro-batches of the current window instead"
    ),
    "schedule_ignored": (
        "every window has the first pair's accum_steps: none of the schedule's later pairs "
        "changed a window within these {total} samples. from_sample counts samples (not "
        "micro-batches or windows): {pair} applies from the first window that starts at or "
        "after sample {from_sample}"
    ),
    "schedule_in_micro_batches": (
        "your windows change their accum_steps where the count of micro-batches reaches "
        "from_sample. from_sample counts samples: {pair} applies from the first window that "
        "starts at or after sample {from_sample} (micro-batch {micro_batch} or later, counted "
        "from 0), not from micro-batch {from_sample}"
    ),
    "loss_scale_not_updated": (
        "your scales are those of the first phase's window size. After a change the window "
        "holds another number of micro-batches, so each micro-batch's scale is its samples "
        "over its own window's samples"
    ),
    "last_window_scaled_by_n": (
        "the last window is short, and you scaled its micro-batches by its phase's "
        "accum_steps, as if it were full; its gradient is then too small. Divide by the "
        "samples the window really has"
    ),
    "short_micro_batch_weighted_as_full": (
        "you gave each micro-batch 1 / (micro-batches in the window), but the last "
        "micro-batch is short: it then weighs as much as a full one. Scale each micro-batch "
        "by its samples over the window's samples"
    ),
    "scheduler_in_micro_steps": (
        "that counts micro-batches. The optimizer and the scheduler step once per window, so "
        "count windows: a schedule sized in micro-batches would not reach its end"
    ),
    "scheduler_length_from_first_batch": (
        "that is the step count if every window had the first phase's accum_steps. The ramp "
        "changes the windows' size, so count the windows of the plan itself"
    ),
    "scheduler_length_from_final_batch": (
        "that is the step count if every window had the last phase's accum_steps, as if the "
        "batch had been the final one all along. The ramp's early windows are smaller, so "
        "count the windows of the plan itself; a schedule sized like this ends too soon"
    ),
}


def _ramp_refusal(spec) -> str | None:
    total, micro, schedule = spec["total"], spec["micro"], spec["schedule"]
    if micro < 1:
        return f"micro_batch_size {micro} holds no samples (it must be at least 1)"
    if total < 1:
        return f"total_samples {total} leaves nothing to train on (it must be at least 1)"
    if not schedule:
        return "an empty schedule gives no window any accum_steps"
    if schedule[0][0] != 0:
        return f"the schedule's first pair is at sample {schedule[0][0]}, not 0"
    starts = [from_sample for from_sample, _ in schedule]
    if any(after <= before for before, after in zip(starts, starts[1:], strict=False)):
        return f"the schedule's from_samples {starts} are not sorted (each larger than the last)"
    if any(accum < 1 for _, accum in schedule):
        return "an accum_steps below 1 gives windows without micro-batches"
    return None


def _accum_at(pairs, sample: int, strict: bool = False) -> int:
    accum = pairs[0][1]
    for from_sample, steps in pairs:
        if from_sample < sample or (from_sample == sample and not strict):
            accum = steps
    return accum


def _grid(start: int, stop: int, micro: int) -> list[list[int]]:
    return [[a, min(a + micro, stop)] for a in range(start, stop, micro)]


def _chunks(ranges: list, size: int) -> Windows:
    return [ranges[i : i + size] for i in range(0, len(ranges), size)]


def _greedy(grid, accum_for) -> Windows:
    """Windows over ``grid``; ``accum_for(start, previous_start)`` sizes each one."""
    windows, i, previous = [], 0, None
    while i < len(grid):
        size = accum_for(grid[i][0], previous)
        windows.append(grid[i : i + size])
        previous, i = grid[i][0], i + size
    return windows


def _closing(grid, close) -> Windows:
    """Windows over ``grid`` that end after a micro-batch for which ``close`` says so."""
    windows, window = [], []
    for index, micro_batch in enumerate(grid):
        window.append(micro_batch)
        if close(index, micro_batch, window):
            windows.append(window)
            window = []
    return windows + ([window] if window else [])


def _phases(total: int, pairs) -> list[tuple[int, int, int]]:
    """(start, stop, accum_steps) of each phase that begins before ``total``."""
    active = [(f, n) for f, n in pairs if f < total]
    stops = [f for f, _ in active[1:]] + [total]
    return [(f, stop, n) for (f, n), stop in zip(active, stops, strict=True)]


def _mistaken_windows(total: int, micro: int, pairs) -> dict[str, list[Windows]]:
    """Windows that each known mistake gives, by mistake name (several ways to make some)."""
    grid = _grid(0, total, micro)
    phases = _phases(total, pairs)
    right = _greedy(grid, lambda start, _: _accum_at(pairs, start))

    def cut_at_changes(split_micro_batches: bool) -> Windows:
        if split_micro_batches:
            return [w for f, stop, n in phases for w in _chunks(_grid(f, stop, micro), n)]
        windows = []
        for f, stop, n in phases:
            inside = [mb for mb in grid if f <= mb[0] < stop]
            windows += _chunks(inside, n)
        return windows

    def jumping(restart: bool) -> Windows:
        windows, position = [], 0
        for index, (f, stop, n) in enumerate(phases):
            last = index == len(phases) - 1
            position = f if restart else max(position, f)
            while position < stop:
                end = position + n * micro
                if not restart and not last and end > stop:
                    break
                windows.append(_grid(position, min(end, total), micro))
                position = min(end, total)
        return windows

    full = total // micro * micro
    return {
        "phase_change_late": [
            _greedy(grid, lambda start, _: _accum_at(pairs, start, strict=True)),
            _greedy(grid, lambda _, previous: _accum_at(pairs, previous or 0)),
        ],
        "phase_change_early": [
            _greedy(grid, lambda start, _: _accum_at(pairs, min(start + micro, total) - 1)),
        ],
        "window_split_at_change": [
            _closing(grid, lambda _, mb, w: len(w) >= _accum_at(pairs, mb[0])),
            cut_at_changes(split_micro_batches=True),
            cut_at_changes(split_micro_batches=False),
        ],
        "boundary_by_global_count": [
            _closing(grid, lambda i, mb, _: (i + 1) % _accum_at(pairs, mb[0]) == 0)
        ],
        "schedule_ignored": [_chunks(grid, pairs[0][1])],
        "schedule_in_micro_batches": [
            _greedy(grid, lambda start, _: _accum_at(pairs, start // micro))
        ],
        "samples_skipped": [jumping(restart=False)],
        "samples_repeated": [jumping(restart=True)],
        "samples_dropped": [
            _greedy(_grid(0, full, micro), lambda start, _: _accum_at(pairs, start)),
            [
                w
                for w in right
                if len(w) == _accum_at(pairs, w[0][0]) and w[-1][1] - w[-1][0] == micro
            ],
        ],
    }


def _mistaken_scales(micro: int, pairs, windows: Windows) -> dict[str, list[list[list[float]]]]:
    def by(denominator) -> list[list[float]]:
        return [[denominator(w, b - a) for a, b in w] for w in windows]

    first = pairs[0][1]
    return {
        "loss_scale_not_updated": [
            by(lambda w, size: 1 / first),
            by(lambda w, size: size / (first * micro)),
        ],
        "last_window_scaled_by_n": [
            by(lambda w, size: 1 / _accum_at(pairs, w[0][0])),
            by(lambda w, size: size / (_accum_at(pairs, w[0][0]) * micro)),
        ],
        "short_micro_batch_weighted_as_full": [by(lambda w, size: 1 / len(w))],
    }


def _same_scales(got, want) -> bool:
    return all(
        len(g) == len(w) and all(is_close(a, b) for a, b in zip(g, w, strict=True))
        for g, w in zip(got, want, strict=True)
    )


def _read_nested(value, read_item) -> list | str:
    """``value`` as a list of lists of ``read_item(item)``, or a string saying it is not."""
    if isinstance(value, (str, bytes, Mapping)):
        return describe(value)
    result, count = [], 0
    try:
        for window in value:
            if isinstance(window, (str, bytes, Mapping)):
                return describe(value)
            items = []
            for item in window:
                read = read_item(item)
                if read is None:
                    return f"an item {repr(item)[:60]} in {repr(value)[:120]}"
                items.append(read)
                count += 1
                if count > MAX_MICRO_BATCHES:
                    return f"more than {MAX_MICRO_BATCHES} micro-batches"
            result.append(items)
            if len(result) > MAX_MICRO_BATCHES:  # empty windows count too: a generator of
                return f"more than {MAX_MICRO_BATCHES} windows"  # them would never end
    except TypeError:
        return describe(value)
    return result


def _read_range(item) -> list[int] | None:
    if isinstance(item, range):
        return [item.start, item.stop] if item.step == 1 else None
    if isinstance(item, (str, bytes, Mapping)):
        return None
    try:
        pair = list(item)
    except TypeError:
        return None
    if len(pair) != 2 or not all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in pair
    ):
        return None
    return [int(pair[0]), int(pair[1])]


def _read_plan(returned) -> dict:
    if not isinstance(returned, Mapping):
        return {"returned": describe(returned)}
    steps = returned.get("optimizer_steps")
    is_int = isinstance(steps, numbers.Integral) and not isinstance(steps, bool)
    return {
        "keys": [key for key in ("windows", "scales", "optimizer_steps") if key in returned],
        "windows": _read_nested(returned.get("windows"), _read_range),
        "scales": _read_nested(returned.get("scales"), as_number),
        "steps": int(steps) if is_int else repr(steps)[:80],
    }


def _short(windows) -> str:
    text = str(windows)
    return text if len(text) <= 160 else text[:150] + " ...]"


def _coverage_problem(windows: Windows, total: int) -> str | None:
    """What is wrong with the samples the windows cover, or None: each once, in order."""
    position = 0
    for a, b in (r for w in windows for r in w):
        if b <= a:
            return f"the micro-batch [{a}, {b}] holds no samples"
        if a > position:
            return f"samples {position} to {a - 1} are never trained on (a gap before [{a}, {b}])"
        if a < position:
            return f"samples {a} to {min(b, position) - 1} are trained on twice (at [{a}, {b}])"
        position = b
    if position < total:
        return f"samples {position} to {total - 1} (the end) are never trained on"
    if position > total:
        return f"your plan reaches sample {position}, but only {total} samples exist"
    return None


@register
class RampPlan(Question):
    name = "ramp_plan"
    module = MODULE
    points = 3
    rules = (
        Rule(
            "a window that starts at sample $s$ uses the `accum_steps` of the last pair with "
            "`from_sample <= s`.",
            "the specs the rules accept; changes inside a window in most",
            (
                "phase_change_early",
                "phase_change_late",
                "accum_looked_up_after_window",
                "schedule_ignored",
                "schedule_in_micro_batches",
                "window_split_at_change",
                "window_cut_at_from_sample",
                "boundary_by_global_count",
            ),
            lambda spec: _ramp_refusal(spec) is None,
        ),
        Rule(
            "Windows hold up to `accum_steps` micro-batches of `micro_batch_size` samples, "
            "consumed in order; the very last micro-batch may be shorter, and the last window "
            "may hold fewer micro-batches.",
            "the specs the rules accept; totals the micro-batch does not divide in some",
            ("samples_dropped", "short_window_dropped", "samples_skipped", "samples_repeated"),
            lambda spec: _ramp_refusal(spec) is None,
        ),
        Rule(
            "# per micro-batch: its samples / its window's samples",
            "the specs the rules accept",
            (
                "loss_scale_not_updated",
                "last_window_scaled_by_n",
                "short_micro_batch_weighted_as_full",
            ),
            lambda spec: _ramp_refusal(spec) is None,
        ),
        Rule(
            "# the number of windows: the scheduler's length",
            "the specs the rules accept",
            (
                "scheduler_in_micro_steps",
                "scheduler_length_from_first_batch",
                "scheduler_length_from_final_batch",
            ),
            lambda spec: _ramp_refusal(spec) is None,
        ),
        Rule(
            "Raise `ValueError` for `total_samples` or `micro_batch_size` below 1, an empty "
            "schedule, one that does not start at sample 0, `from_sample` values that are not "
            "strictly increasing, or an `accum_steps` below 1.",
            "the specs the rules refuse",
            ("schedule_not_checked", "ramp_wrong_exception", "unsorted_schedule_accepted"),
            lambda spec: _ramp_refusal(spec) is not None,
        ),
    )

    def public_specs(self):
        return [
            # a ramp whose step counts differ however they are miscounted: 8 windows, 25
            # micro-batches, 12 or 13 at the first accum_steps, 5 at the last
            {"total": 100, "micro": 4, "schedule": [[0, 2], [24, 3], [60, 5]]},
            # changes on window boundaries, accum_steps up then down
            {"total": 48, "micro": 4, "schedule": [[0, 2], [16, 4], [32, 1]]},
            # a change inside a window: it waits for the window that starts at 20
            {"total": 50, "micro": 5, "schedule": [[0, 2], [15, 3]]},
            # a change inside a window's first micro-batch: still the next window's
            {"total": 44, "micro": 4, "schedule": [[0, 1], [10, 3]]},
            # the last window is one short micro-batch
            {"total": 23, "micro": 4, "schedule": [[0, 2], [8, 3]]},
            # one phase; the last window ends in a short micro-batch
            {"total": 30, "micro": 4, "schedule": [[0, 3]]},
            {"total": 40, "micro": 4, "schedule": [[4, 2], [16, 4]]},  # not from sample 0
            {"total": 40, "micro": 4, "schedule": [[0, 2], [32, 4], [16, 1]]},  # not sorted
        ]

    def hidden_specs(self, rng):
        specs = [
            # fixed edge cases, whatever the draw:
            {"total": 60, "micro": 3, "schedule": [[0, 2], [12, 4]]},  # exactly on a boundary
            {"total": 70, "micro": 4, "schedule": [[0, 3], [20, 2]]},  # inside a window, down
            {"total": 45, "micro": 4, "schedule": [[0, 1], [10, 3]]},  # inside a micro-batch
            {"total": 25, "micro": 4, "schedule": [[0, 3]]},  # last window: one short batch
            {"total": 32, "micro": 4, "schedule": [[0, 4]]},  # one phase, every window full
            {"total": 40, "micro": 2, "schedule": [[0, 4], [8, 1], [20, 2]]},  # down, then up
            {"total": 60, "micro": 5, "schedule": [[0, 4], [5, 1], [12, 3]]},  # two in a window
            {"total": 20, "micro": 2, "schedule": [[0, 2], [100, 4]]},  # a change never reached
            {"total": 3, "micro": 8, "schedule": [[0, 2]]},  # one micro-batch, shorter than 8
            # refusals
            {"total": 40, "micro": 0, "schedule": [[0, 2]]},
            {"total": 0, "micro": 4, "schedule": [[0, 2]]},
            {"total": 40, "micro": 4, "schedule": []},
            {"total": 40, "micro": 4, "schedule": [[0, 2], [8, 0]]},
            {"total": 40, "micro": 4, "schedule": [[0, 2], [8, 3], [8, 4]]},
        ]
        for _ in range(4):
            micro = rng.randint(1, 8)
            total = rng.randint(10, 40) * micro + rng.randint(0, micro - 1)
            changes = sorted(rng.sample(range(1, total), rng.randint(0, min(3, total - 1))))
            accum = [rng.randint(1, 8) for _ in range(len(changes) + 1)]
            schedule = [[f, n] for f, n in zip([0, *changes], accum, strict=True)]
            specs.append({"total": total, "micro": micro, "schedule": schedule})
        return specs

    def run(self, fn, spec):
        def answer(spec):
            schedule = [tuple(pair) for pair in spec["schedule"]]
            kept = Kept(schedule=schedule)
            return {**_read_plan(fn(spec["total"], spec["micro"], schedule)), **kept.report()}

        if _ramp_refusal(spec) is not None:
            args = (spec["total"], spec["micro"], [tuple(pair) for pair in spec["schedule"]])
            return refused(fn, args, {})
        return repeated(answer, spec)

    def reference(self):
        return ramp_plan

    def judge(self, spec, outputs, expected):
        total, micro = spec["total"], spec["micro"]
        pairs = [tuple(pair) for pair in spec["schedule"]]
        setting = (
            f"(total_samples {total}, micro_batch_size {micro}, schedule "
            f"{', '.join(map(str, pairs)) or 'empty'})"
        )
        reason = _ramp_refusal(spec)
        if reason is not None:
            judge_refusal(outputs, reason, setting)
            return
        judge_left_behind(outputs, setting)
        judge_repeated(outputs, setting)
        windows, scales, steps = self._structure(outputs, setting)
        want_windows = expected["windows"]
        if windows != want_windows:
            self._judge_windows(windows, want_windows, total, micro, pairs, setting)
        if not _same_scales(scales, expected["scales"]):
            name = only_name(
                {
                    mistake: any(
                        _same_scales(scales, s) and not _same_scales(s, expected["scales"])
                        for s in candidates
                    )
                    for mistake, candidates in _mistaken_scales(micro, pairs, windows).items()
                }
            )
            index = next(
                i
                for i, (g, w) in enumerate(zip(scales, expected["scales"], strict=True))
                if not _same_scales([g], [w])
            )
            where = (
                f"window {index + 1} ({_short(windows[index])}) has the scales "
                f"{show(scales[index])}; they should be {show(expected['scales'][index])}"
            )
            if name is None:
                raise Failure(
                    f"{where} {setting}: each micro-batch's scale is its samples over its "
                    "window's samples, so a window's scales add up to 1."
                )
            raise Failure(f"{where} {setting}: {_PLAN_MESSAGES[name]}.", name)
        want_steps = expected["steps"]
        if steps != want_steps:
            n_micro = -(-total // micro)
            first, last = pairs[0][1], _phases(total, pairs)[-1][2]

            def sized_by(accum: int) -> tuple[int, ...]:
                return -(-n_micro // accum), n_micro // accum, total // (accum * micro)

            name = only_name(
                {
                    "scheduler_in_micro_steps": steps == n_micro,
                    "scheduler_length_from_first_batch": steps in sized_by(first),
                    "scheduler_length_from_final_batch": steps in sized_by(last),
                }
            )
            # a count one off, or of the full windows only, names none of these: a value that
            # also fits such a slip gets no name
            full = sum(
                len(w) == _accum_at(pairs, w[0][0]) and w[-1][1] - w[-1][0] == micro
                for w in expected["windows"]
            )
            if steps in (want_steps - 1, want_steps + 1, full):
                name = None
            text = f"optimizer_steps is {steps} {setting}, but the plan has {want_steps} windows"
            if name is None:
                raise Failure(f"{text}: one optimizer step per window.")
            raise Failure(f"{text}: {_PLAN_MESSAGES[name]}.", name)

    @staticmethod
    def _structure(outputs, setting):
        if "returned" in outputs:
            raise Failure(
                "Return a dict with the keys 'windows', 'scales' and 'optimizer_steps' "
                f"{setting}; got {outputs['returned']}."
            )
        missing = [
            key
            for key in ("windows", "scales", "optimizer_steps")
            if key not in outputs.get("keys", [])
        ]
        if missing:
            raise Failure(f"Your dict has no {', '.join(map(repr, missing))} {setting}.")
        windows, scales, steps = outputs.get("windows"), outputs.get("scales"), outputs.get("steps")
        if not isinstance(windows, list) or not all(
            isinstance(w, list) and all(_pair(r) for r in w) for w in windows
        ):
            raise Failure(
                "'windows' must be a list of windows, each a list of [start, stop] pairs of "
                f"whole numbers {setting}; got {windows}."
            )
        if any(not window for window in windows):
            raise Failure(
                f"Every window holds at least one micro-batch; yours has an empty one {setting}."
            )
        if (
            not isinstance(scales, list)
            or not all(isinstance(s, list) and all(_real(v) for v in s) for s in scales)
            or [len(s) for s in scales] != [len(w) for w in windows]
        ):
            raise Failure(
                "'scales' must have the shape of 'windows': for each window, one number per "
                f"micro-batch {setting}; got {_short(scales)} for {len(windows)} windows."
            )
        if not is_whole(steps):
            raise Failure(
                f"'optimizer_steps' must be a whole number (an int), got {steps} {setting}.",
                "not_an_int",
            )
        return windows, scales, steps

    @staticmethod
    def _judge_windows(windows, want, total, micro, pairs, setting):
        matched = {
            mistake: any(windows == c and c != want for c in candidates)
            for mistake, candidates in _mistaken_windows(total, micro, pairs).items()
        }
        # the schedule read in micro-batches often changes no window within the samples:
        # the same windows as a schedule ignored, which that message words truly for both
        if matched["schedule_ignored"]:
            matched["schedule_in_micro_batches"] = False
        name = only_name(matched)
        later = next((p for p in pairs[1:] if p[0] < total), pairs[-1])
        details = {
            "total": total,
            "pair": later,
            "from_sample": later[0],
            "micro_batch": -(-later[0] // micro),
        }
        problem = _coverage_problem(windows, total)
        if problem is not None:
            if name is None:
                raise Failure(
                    f"In your plan {setting}, {problem}. Every sample must be trained on "
                    "exactly once, in order: each micro-batch starts where the last one stopped."
                )
            why = _PLAN_MESSAGES[name].format(**details)
            raise Failure(f"In your plan {setting}, {problem}: {why}.", name)
        index = next(
            (i for i, (g, w) in enumerate(zip(windows, want, strict=False)) if g != w),
            min(len(windows), len(want)) - 1,
        )
        start = want[index][0][0]
        pair = max(p for p in pairs if p[0] <= start)
        where = (
            f"Your window {index + 1} is {_short(windows[index])} {setting}. It starts at "
            f"sample {start}, and the last pair with from_sample <= {start} is {pair}, so it "
            f"should be {_short(want[index])}"
        )
        if name is not None:
            raise Failure(f"{where}: {_PLAN_MESSAGES[name].format(**details)}.", name)
        flat = [r for w in windows for r in w]
        for a, b in flat[:-1]:
            if b - a != micro:
                raise Failure(
                    f"Your micro-batch [{a}, {b}] holds {b - a} samples {setting}: every "
                    f"micro-batch holds micro_batch_size = {micro} samples, except that the "
                    "very last one of training may be shorter."
                )
        raise Failure(f"{where}.")

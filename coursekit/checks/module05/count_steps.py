"""``count_steps``: a run's step counts, as the loop, a prepared scheduler and DeepSpeed see them.

The student's function returns a dict of four whole numbers for a run of
``micro_batches_per_epoch`` micro-batches on each process, ``accum_steps`` per window,
``epochs`` epochs and ``num_processes`` processes: the loop's optimizer steps (each epoch's
short last window stepped too), the total an ``accelerator.prepare``-d scheduler needs, the
steps a DeepSpeed engine takes (it counts micro-batches across epochs and never steps a
short window), and the divisor to apply to the loss before ``engine.backward``. A wrong
count is named when exactly one known slip gives it, with the issue it comes from.
"""

from __future__ import annotations

from coursekit.checks.module05.common import MODULE
from coursekit.checks.question import Failure, Question, Rule
from coursekit.checks.registry import register
from coursekit.checks.side_effects import judge_repeated, repeated
from coursekit.step_counts import count_steps

_COUNT_KEYS = (
    "optimizer_steps",
    "prepared_scheduler_total",
    "deepspeed_steps",
    "deepspeed_loss_divisor",
)


def _reference_counts(micro_batches_per_epoch, accum_steps, epochs, num_processes):
    return count_steps(micro_batches_per_epoch, accum_steps, epochs, num_processes).as_dict()


def _count_patterns(micro: int, accum: int, epochs: int, procs: int) -> dict[str, dict]:
    """Each key's known wrong answers, by mistake name (the right one is left out later)."""
    windows = -(-micro // accum)  # per epoch, the short one included
    steps = windows * epochs
    return {
        "optimizer_steps": {
            "schedule_in_micro_steps": micro * epochs,
            "short_window_not_counted": micro // accum * epochs,
            "windows_across_epochs": -(-micro * epochs // accum),
            "micro_batches_split_across_processes": -(-micro // (accum * procs)) * epochs,
            "epochs_ignored": windows,
        },
        "prepared_scheduler_total": {
            "scheduler_not_multiplied": steps,
            "scheduler_divided_by_processes": steps // procs,
            "scheduler_in_micro_steps": micro * epochs * procs,
        },
        "deepspeed_steps": {
            "deepspeed_counted_like_the_loop": steps,
            "deepspeed_rounded_up": -(-micro * epochs // accum),
            "deepspeed_windows_per_epoch": micro // accum * epochs,
        },
        "deepspeed_loss_divisor": {"loss_divided_twice_with_deepspeed": accum},
    }


_COUNT_MESSAGES = {
    "schedule_in_micro_steps": (
        "that is the number of micro-batches. A scheduler and an optimizer step once per "
        "window, so count windows: a schedule sized in micro-steps ends at 1/{accum} of its "
        "decay (Accelerate #1170)."
    ),
    "short_window_not_counted": (
        "that counts only the full windows (floor). The loop also steps each epoch's short last "
        "window, so each epoch has ceil({micro} / {accum}) = {windows} steps. Sized with floor, "
        "a run stops before its last epoch ends (transformers #33455)."
    ),
    "windows_across_epochs": (
        "that counts windows over the whole run as one stream. The loop closes a window at the "
        "end of every epoch, so each epoch has ceil({micro} / {accum}) = {windows} steps."
    ),
    "micro_batches_split_across_processes": (
        "the micro-batches per epoch are each process's own (a prepared dataloader already "
        "split them), so do not divide them by the {procs} processes again."
    ),
    "epochs_ignored": "that is one epoch's steps; the run has {epochs} epochs.",
    "scheduler_not_multiplied": (
        "that is the optimizer steps. A scheduler that went through accelerator.prepare steps "
        "num_processes = {procs} times per optimizer step (split_batches=False, the default), "
        "so this one would reach its end after 1/{procs} of the run (Accelerate #2926). Give it "
        "the optimizer steps times the number of processes."
    ),
    "scheduler_divided_by_processes": (
        "a prepared scheduler steps num_processes = {procs} times per optimizer step, so "
        "multiply the optimizer steps by the number of processes, not divide."
    ),
    "scheduler_in_micro_steps": (
        "that counts micro-batches. The prepared scheduler only moves at an optimizer step "
        "({procs} times then), so count optimizer steps and multiply by {procs}."
    ),
    "deepspeed_counted_like_the_loop": (
        "that is the loop's count. An engine that decides the boundary itself steps after every "
        "{accum}th micro-batch of the whole run, (micro_steps + 1) % {accum} == 0: it never "
        "steps a short window, its windows run across epoch ends, and what is left at the end "
        "is never stepped. So the two counts disagree (transformers #22082)."
    ),
    "deepspeed_rounded_up": (
        "the engine never steps the micro-batches left over at the end of the run: they do not "
        "complete a window. Round down."
    ),
    "deepspeed_windows_per_epoch": (
        "the engine does not know where an epoch ends: it counts micro-batches across epochs, "
        "so an epoch's leftovers share a window with the next epoch's first micro-batches."
    ),
    "loss_divided_twice_with_deepspeed": (
        "engine.backward(loss) already divides the loss by gradient_accumulation_steps "
        "(scale_wrt_gas=True by default). Divided by {accum} before that too, every step is "
        "{accum} times too small (DeepSpeed #1107)."
    ),
}


# how each count is made, said with the spec's numbers when a count is off by no known slip
_HOW = {
    "optimizer_steps": "ceil({micro} / {accum}) = {windows} steps per epoch, times {epochs}",
    "prepared_scheduler_total": "the optimizer steps times the {procs} processes",
    "deepspeed_steps": (
        "floor({micro} x {epochs} / {accum}): windows run across epochs, leftovers never step"
    ),
    "deepspeed_loss_divisor": "1: engine.backward already divides by gradient_accumulation_steps",
}


def _off_by(key: str, got: int, want: int, details: dict) -> tuple[str, str | None]:
    """What differs, in the spec's numbers: the count's recipe, and by how much it is off
    (per epoch, when it is off by a whole number of steps every epoch)."""
    how = _HOW[key].format(**details)
    diff, epochs = got - want, details["epochs"]
    more = "more" if diff > 0 else "fewer"
    if key == "optimizer_steps" and epochs > 1 and diff % epochs == 0:
        per = abs(diff) // epochs
        if per == 1 and diff > 0:
            exact = details["micro"] % details["accum"] == 0
            why = (
                f" {details['micro']} micro-batches fill exactly {details['windows']} windows of "
                f"{details['accum']}, with no short window left to step (a ceiling written as "
                "a // b + 1, for instance, adds one where b divides a; -(-a // b) does not)."
                if exact
                else " Each epoch steps once per window, its short last window included, and "
                "no more."
            )
            return (
                f"{how}. You count one step too many in every epoch.{why}",
                "extra_step_per_epoch",
            )
        return f"{how}. You count {per} step{'s' if per != 1 else ''} {more} in every epoch.", None
    return f"{how}; yours is {abs(diff)} {more}.", None


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@register
class CountSteps(Question):
    name = "count_steps"
    module = MODULE
    points = 2
    rules = (
        Rule(
            '`"optimizer_steps"`: the optimizer steps of a loop that steps after every '
            "`accum_steps`-th micro-batch of an epoch *and* after the epoch's last micro-batch;",
            "every spec; micro-batches per epoch that accum_steps does not divide in most",
            (
                "short_window_not_counted",
                "windows_across_epochs",
                "epochs_ignored",
                "extra_step_per_epoch",
                "micro_batches_split_across_processes",
            ),
        ),
        Rule(
            '`"prepared_scheduler_total"`: the length to give a scheduler that goes through '
            "`accelerator.prepare` (default `split_batches=False`) on `num_processes` processes",
            "every spec; 1 to 4 processes",
            (
                "schedule_in_micro_steps",
                "scheduler_not_multiplied",
                "scheduler_divided_by_processes",
                "scheduler_in_micro_steps",
            ),
        ),
        Rule(
            '`"deepspeed_steps"`: the optimizer steps a DeepSpeed engine takes over the whole '
            "run when the loop calls `engine.step()` after every micro-batch and the engine "
            "decides the boundary itself;",
            "every spec",
            (
                "deepspeed_counted_like_the_loop",
                "deepspeed_rounded_up",
                "deepspeed_windows_per_epoch",
            ),
        ),
        Rule(
            '`"deepspeed_loss_divisor"`: what to divide each micro-batch\'s mean loss by before '
            "`engine.backward(loss)` so that each step uses the window's mean gradient.",
            "every spec",
            ("loss_divided_twice_with_deepspeed",),
        ),
        Rule(
            "Return a dict with four whole numbers (`int`):",
            "every spec",
            ("counts_as_floats", "tuple_returned", "totals_in_default_argument"),
        ),
    )

    def public_specs(self):
        return [
            {"micro": 10, "accum": 3, "epochs": 4, "procs": 2},  # every wrong count differs here
            {"micro": 12, "accum": 4, "epochs": 2, "procs": 1},  # every window full
            {"micro": 5, "accum": 2, "epochs": 2, "procs": 4},
            {"micro": 3, "accum": 8, "epochs": 2, "procs": 2},  # fewer micro-batches than N
        ]

    def hidden_specs(self, rng):
        specs = [
            # fixed: each separates patterns that random draws can make coincide
            {"micro": 7, "accum": 3, "epochs": 4, "procs": 3},
            {"micro": 9, "accum": 4, "epochs": 1, "procs": 8},  # one epoch: no drift yet
            {"micro": 0, "accum": 4, "epochs": 3, "procs": 2},  # an empty dataloader
            {"micro": 11, "accum": 1, "epochs": 2, "procs": 2},  # no accumulation at all
        ]
        for _ in range(4):
            accum = rng.randint(2, 16)
            micro = rng.randint(accum + 1, 40 * accum)
            if micro % accum == 0:
                micro += 1
            specs.append(
                {
                    "micro": micro,
                    "accum": accum,
                    "epochs": rng.randint(2, 6),
                    "procs": rng.choice([2, 3, 4, 8]),
                }
            )
        return specs

    def run(self, fn, spec):
        return repeated(lambda spec: self._answer(fn, spec), spec)

    @staticmethod
    def _answer(fn, spec):
        returned = fn(spec["micro"], spec["accum"], spec["epochs"], spec["procs"])
        if not isinstance(returned, dict):
            return {"returned": f"{type(returned).__name__}: {repr(returned)[:160]}"}
        counts = {}
        for key in _COUNT_KEYS:
            value = returned.get(key)
            counts[key] = value if _whole(value) else repr(value)[:80]
        return {"counts": counts, "keys": sorted(str(k)[:40] for k in returned)[:12]}

    def reference(self):
        return _reference_counts

    def judge(self, spec, outputs, expected):
        micro, accum, epochs, procs = (spec[k] for k in ("micro", "accum", "epochs", "procs"))
        setting = (
            f"({micro} micro-batches per epoch on each process, {accum} accumulation steps, "
            f"{epochs} epochs, {procs} process{'es' if procs != 1 else ''})"
        )
        judge_repeated(outputs, setting)
        counts = outputs.get("counts")
        if not isinstance(counts, dict):
            raise Failure(
                f"Return a dict with the keys {', '.join(_COUNT_KEYS)}; got "
                f"{outputs.get('returned')} {setting}."
            )
        missing = [key for key in _COUNT_KEYS if key not in outputs.get("keys", [])]
        if missing:
            raise Failure(f"Your dict has no {', '.join(map(repr, missing))} {setting}.")
        wanted = expected["counts"]
        details = {
            "micro": micro,
            "accum": accum,
            "epochs": epochs,
            "procs": procs,
            "windows": -(-micro // accum),
        }
        patterns = _count_patterns(micro, accum, epochs, procs)
        for key in _COUNT_KEYS:
            got = counts.get(key)
            if not _whole(got):
                raise Failure(
                    f"{key} must be a whole number (an int), got {got} {setting}. Counts of "
                    "steps are whole: use // or a whole-number ceiling, -(-a // b).",
                    "not_an_int",
                )
            if got == wanted[key]:
                continue
            names = [
                name
                for name, value in patterns[key].items()
                if value == got and value != wanted[key]
            ]
            if len(names) == 1:
                why = _COUNT_MESSAGES[names[0]].format(**details)
                raise Failure(f"{key} is {got} {setting}: {why}", names[0])
            text, name = _off_by(key, got, wanted[key], details)
            name = None if names else name  # several known slips give it: none is sure
            raise Failure(f"{key} is {got} {setting}, but it should be {wanted[key]}: {text}", name)

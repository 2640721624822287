"""``resolve_batch_config``: DeepSpeed's three batch settings from any two of them, or a refusal.

train_batch_size = micro-batch x accumulation steps x world_size. The check calls the
student's function on settings that fit, that cannot all hold, that do not divide and that
give too few, and judges the answer (the three numbers, in order, as ints) or the exception
(a ValueError whose message says what is wrong). A one-device answer where the world size
would not divide is named; fixed hidden cases catch a remainder check that leaves the world
size out.
"""

from __future__ import annotations

from coursekit.checks.module04.common import MODULE
from coursekit.checks.question import Failure, Question, Rule
from coursekit.checks.registry import register
from coursekit.checks.side_effects import judge_repeated
from coursekit.zero import resolve_batch_config

_SETTINGS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def _reference_resolve(world_size, train_batch_size=None, micro=None, accum=None):
    config = resolve_batch_config(world_size, train_batch_size, micro, accum)
    return (
        config.train_batch_size,
        config.train_micro_batch_size_per_gpu,
        config.gradient_accumulation_steps,
    )


def _case(world_size, total=None, micro=None, accum=None, label=""):
    return {"world_size": world_size, "given": [total, micro, accum], "label": label}


# Settings no spec uses, given between two calls on a spec's: a function of its arguments
# answers the spec the same both times.
_OTHER_SETTINGS = _case(1, 35, 5, 7)


def _resolves_without_world(world, total, micro, accum, outputs) -> bool:
    """Whether the answer is the one-device answer to settings that do not fit ``world``."""
    try:
        return outputs.get("answer") == list(_reference_resolve(1, total, micro, accum))
    except ValueError:
        return False


@register
class ResolveBatchConfig(Question):
    name = "resolve_batch_config"
    module = MODULE
    points = 2
    rules = (
        Rule(
            "return the three numbers `(train_batch_size, micro, accum)` as `int`s, deriving a "
            "missing one.",
            "the specs with two or three settings that agree (world sizes 1 to 8)",
            (
                "world_size_ignored",
                "true_division",
                "wrong_order",
                "world_size_in_one_branch",
                "stale_settings",
                "consistency_without_world_size",
            ),
        ),
        Rule(
            "Raise `ValueError` when fewer than two are given",
            "the specs with one setting or none",
            ("too_few_accepted", "accum_defaults_to_one", "wrong_exception"),
            lambda spec: sum(v is not None for v in spec["given"]) < 2,
        ),
        Rule(
            "when the three do not agree",
            "the specs with all three given",
            ("inconsistent_accepted",),
            lambda spec: None not in spec["given"],
        ),
        Rule(
            "or when the missing one would not be a whole number",
            "the specs with two settings given",
            ("remainder_ignored", "remainder_without_world_size"),
            lambda spec: sum(v is not None for v in spec["given"]) == 2,
        ),
        Rule(
            "with a message that names the settings or shows the numbers",
            "the specs that must be refused",
            ("message_too_short",),
        ),
    )

    def public_specs(self):
        return [
            _case(4, 256, 8, None, "total and micro-batch given"),
            _case(4, 256, None, 8, "total and accumulation given"),
            _case(8, None, 4, 2, "micro-batch and accumulation given"),
            _case(2, 64, 8, 4, "all three, consistent"),
            _case(4, 128, 8, 8, "all three, inconsistent"),
            _case(4, 100, 8, None, "a total that does not divide"),
            _case(4, 100, None, 8, "a total that does not divide, micro-batch missing"),
            _case(4, 256, None, None, "only one given"),
        ]

    def hidden_specs(self, rng):
        world, micro, accum = rng.choice([2, 4, 8, 16]), rng.randint(1, 16), rng.randint(1, 16)
        total = world * micro * accum
        return [
            _case(world, total, micro, None, "drawn: accumulation missing"),
            _case(world, total, None, accum, "drawn: micro-batch missing"),
            _case(world, total + world, micro, accum, "drawn: inconsistent"),
            _case(world, total + 1, None, accum, "drawn: does not divide"),
            _case(world, None, micro, None, "drawn: only one given"),
            # Fixed: 60 is a multiple of 6 but not of 6 x 4, so a remainder check that
            # leaves out the world size lets it through.
            _case(4, 60, None, 6, "a total that divides by the accumulation steps only"),
            _case(4, 60, 6, None, "a total that divides by the micro-batch only"),
        ]

    def run(self, fn, spec):
        """The answer, and whether it is the same again after a call on other settings (as
        :func:`repeated`, with settings between that a stale cache would keep)."""
        first = self._answer(fn, spec)
        self._answer(fn, _OTHER_SETTINGS)
        return {**first, "again_same": self._answer(fn, spec) == first}

    @staticmethod
    def _answer(fn, spec):
        total, micro, accum = spec["given"]
        try:
            answer = fn(spec["world_size"], total, micro, accum)
        except NotImplementedError:
            raise
        except Exception as exc:  # which exception is part of the answer
            kind = "ValueError" if isinstance(exc, ValueError) else type(exc).__name__
            return {"raised": kind, "message": str(exc)[:300]}
        try:
            return {
                "answer": [int(v) for v in answer],
                "floats": any(isinstance(v, float) for v in answer),
            }
        except (TypeError, ValueError):
            return {"answer": repr(answer)[:200]}

    def reference(self):
        return _reference_resolve

    def judge(self, spec, outputs, expected):
        world = spec["world_size"]
        total, micro, accum = spec["given"]
        setting = (
            f"({spec['label']}: world_size={world}, train_batch_size={total}, "
            f"train_micro_batch_size_per_gpu={micro}, gradient_accumulation_steps={accum})"
        )
        judge_repeated(outputs, setting)
        raised = outputs.get("raised")
        if "raised" in expected:
            if raised == "ValueError":
                message = str(outputs.get("message", ""))
                says_something = len(message) >= 20 or (
                    len(message) >= 5 and any(c.isdigit() for c in message)
                )
                if not says_something:  # under 20 characters: quoted whole
                    raise Failure(
                        f"You raised ValueError, but its message ({message!r}) does not say what "
                        f"is wrong: name the settings or show the numbers {setting}.",
                        "message_too_short",
                    )
                return
            if raised:
                raise Failure(
                    f"Raise ValueError for settings that do not fit together; you raised "
                    f"{raised} {setting}.",
                    "wrong_exception",
                )
            mistake = "inconsistent_accepted" if None not in spec["given"] else "remainder_ignored"
            if spec["given"].count(None) > 1:
                mistake = "too_few_accepted"
            elif world > 1 and _resolves_without_world(world, total, micro, accum, outputs):
                raise Failure(
                    f"You returned {tuple(outputs['answer'])}: that is the answer for one "
                    "device. With the world size in the arithmetic these settings do not "
                    "divide: raise ValueError. train_batch_size = micro-batch x accumulation "
                    f"steps x world_size {setting}.",
                    "world_size_ignored",
                )
            raise Failure(
                f"These settings cannot all hold, and you returned {outputs.get('answer')}: "
                f"raise ValueError with a message that shows the arithmetic {setting}.",
                mistake,
            )
        if raised:
            said = f"You raised {raised} ({_first_line(outputs.get('message'), 120)})"
            if None not in spec["given"] and world > 1 and total != micro * accum:
                raise Failure(
                    f"{said}, but the settings agree: {total} = {micro} x {accum} x {world}. "
                    f"Only without world_size ({micro} x {accum} = {micro * accum}) would they "
                    "not: train_batch_size = micro-batch x accumulation steps x world_size "
                    f"{setting}.",
                    "world_size_ignored",
                )
            raise Failure(
                f"{said}, but the settings fit together: expected "
                f"{tuple(expected['answer'])} {setting}."
            )
        answer = outputs.get("answer")
        if answer == expected["answer"]:
            if outputs.get("floats") is True:
                raise Failure(
                    f"The numbers are right, but some are floats (e.g. 8.0): batch sizes and "
                    "step counts are whole numbers, and range() or DataLoader(batch_size=...) "
                    f"refuse floats. Use // and return ints {setting}.",
                    "not_integers",
                )
            return
        if isinstance(answer, list) and len(answer) == 3:
            without_world = _reference_resolve(1, total, micro, accum) if world > 1 else None
            if without_world is not None and answer == list(without_world):
                raise Failure(
                    f"You returned {tuple(answer)}: the world size is missing from the "
                    "arithmetic. train_batch_size = micro-batch x accumulation steps x "
                    f"world_size {setting}.",
                    "world_size_ignored",
                )
            if sorted(answer) == sorted(expected["answer"]):
                raise Failure(
                    f"You returned {tuple(answer)}: the right numbers in the wrong order. "
                    "Return (train_batch_size, train_micro_batch_size_per_gpu, "
                    f"gradient_accumulation_steps) {setting}.",
                    "wrong_order",
                )
        raise Failure(
            f"Expected (train_batch_size, train_micro_batch_size_per_gpu, "
            f"gradient_accumulation_steps) = {tuple(expected['answer'])}; got {answer} {setting}."
        )


def _first_line(message: object, chars: int) -> str:
    """A student's exception message as feedback quotes it: its first line, cut short."""
    return str(message or "").split("\n")[0][:chars]

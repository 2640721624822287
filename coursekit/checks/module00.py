"""Public checks for module 0 (00_welcome): a warm-up that shows how checks work."""

from __future__ import annotations

from coursekit.checks.registry import Failure, question

MODULE = "00_welcome"


def _case(micro_batch_size: int, accum_steps: int, world_size: int):
    def case(effective_batch_size):
        expected = micro_batch_size * accum_steps * world_size
        answer = effective_batch_size(micro_batch_size, accum_steps, world_size)
        if answer == expected:
            return
        call = f"effective_batch_size({micro_batch_size}, {accum_steps}, {world_size})"
        if answer == micro_batch_size * accum_steps and world_size > 1:
            raise Failure(
                f"{call} returned {answer}: every one of the {world_size} processes runs its "
                "own micro-batches, so multiply by world_size too.",
                "world_size_ignored",
            )
        sums = {micro_batch_size + accum_steps, micro_batch_size + accum_steps + world_size}
        if answer in sums:
            raise Failure(
                f"{call} returned {answer}: the sizes multiply (N micro-batches of b samples "
                "each are N x b samples), they do not add.",
                "added_not_multiplied",
            )
        raise Failure(f"{call} returned {answer!r}; expected {expected}.")

    return case


@question("effective_batch_size", MODULE, points=1, hidden_tests=False)
def _effective_batch_size_cases():
    return [_case(4, 8, 1), _case(3, 5, 2), _case(1, 1, 1), _case(16, 2, 4)]

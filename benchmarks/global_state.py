"""What putting torch's and the interpreter's state back costs a hand-in (issue 40).

Run: .venv/bin/python benchmarks/global_state.py [--rounds 2000]

The hand-in's process takes the state once when it starts (``global_state.take``) and puts it
back before and after every hidden test (``global_state.restore``, twice a test). Printed:
the median time of one ``take``, of one ``restore`` when nothing changed (every honest test),
and of one ``restore`` that puts back a function mode, a global hook and the default dtype;
and what that adds to a module-1 hand-in (its number of hidden tests, two restores each).
Medians of CPU time in this process, one torch thread, as in a hand-in's process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _median_s(action, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.process_time_ns()
        action()
        times.append(time.process_time_ns() - start)
    return statistics.median(times) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    rounds = parser.parse_args().rounds
    import random

    import torch

    torch.set_num_threads(1)
    import torch.utils._device  # noqa: F401  (as preload.py has it)

    from coursekit.checks import questions_of
    from coursekit.grading.sandbox import global_state
    from coursekit.grading.sandbox.provenance import Provenance

    provenance = Provenance((os.path.dirname(os.path.dirname(torch.__file__)) + "/",))
    provenance.seal()
    take_s = _median_s(global_state.take, max(20, rounds // 50))
    baseline = global_state.take()
    quiet_s = _median_s(lambda: global_state.restore(baseline, provenance), rounds)

    from torch.overrides import TorchFunctionMode

    class Passing(TorchFunctionMode):  # a library-made mode: put back, not flagged
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    module = sys.modules["torch.nn.modules.module"]

    def leave_state_on() -> None:
        Passing().__enter__()
        module.register_module_forward_hook(print)
        torch.set_default_dtype(torch.float64)

    def changed() -> None:
        leave_state_on()
        global_state.restore(baseline, provenance)

    changed_s = _median_s(changed, max(20, rounds // 10)) - _median_s(
        leave_state_on, max(20, rounds // 10)
    )
    global_state.restore(baseline, provenance)
    tests = sum(
        len(q.hidden_specs(random.Random(0)) or q.public_specs())
        for q in questions_of("01_accumulation")
    )
    print(f"take, once a hand-in:                    {take_s * 1e3:8.3f} ms")
    print(f"restore, nothing to put back:            {quiet_s * 1e6:8.1f} us")
    print(f"restore, a mode, a hook and a dtype back: {changed_s * 1e6:8.1f} us")
    per_hand_in = take_s + 2 * tests * quiet_s
    print(
        f"a module-1 hand-in ({tests} hidden tests, two restores each): {per_hand_in * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()

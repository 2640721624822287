"""Hand-in cells that fake the memory test by changing, for a moment, what its harness runs
(issue 40): each wraps the SHOW_PASSES answer (a whole-window forward on a hook-free copy,
every micro-batch passed through the model for show), which every other test passes, and
installs its change from inside the function as the harness calls it (the priming call, in
the hand-in's process, before the measured fork), undoing it where it can before the seal
is compared after the question's tests. Each must lose the memory test's points, or be
flagged (tests/test_memory_rebinding.py)."""

from tests.corpora.instrument_attacks import SHOW_PASSES

_WRAPPED = SHOW_PASSES.replace("def accumulate_window(", "def _show_passes(")

# a stand-in for the function that measures: runs the call unmeasured, reports no rise, and
# puts the real one back (the attack found in the session that closed this)
STAND_IN_MEASURE = (
    _WRAPPED
    + """
import coursekit.checks.memory_peak as _peak
import coursekit.checks.window_memory as _window

_REAL = {name: getattr(_window, name) for name in ("measured", "run_measured")}
_REAL_PEAK = {name: getattr(_peak, name) for name in ("measured", "measured_in_child")
              if hasattr(_peak, name)}


def _put_back():
    for name, value in _REAL.items():
        setattr(_window, name, value)
    for name, value in _REAL_PEAK.items():
        setattr(_peak, name, value)


def _unmeasured(call, warm_up, *args, **kwargs):
    _put_back()
    return {**call(), "peak_above_warm_up": 0}


def _unmeasured_in_child(make, **kwargs):
    _put_back()
    call, warm_up = make()
    warm_up()
    return {**call(), "peak_above_warm_up": 0}


def accumulate_window(model, loss_fn, micro_batches):
    _window.measured = _peak.measured = _unmeasured
    _peak.measured_in_child = _unmeasured_in_child
    return _show_passes(model, loss_fn, micro_batches)
"""
)

# a torch function the warm-up runs, changed for the measured child: there, before the
# warm-up's peak is read, it touches 300 MiB and gives it back, so that the whole window
# rises no higher than the warm-up did; then it puts torch's own back
RAISED_WARM_UP = (
    _WRAPPED
    + """
import os as _os
from torch.nn import functional as _functional

_LINEAR, _HOME = _functional.linear, _os.getpid()


def _inflating_linear(*args, **kwargs):
    if _os.getpid() != _HOME:
        _functional.linear = _LINEAR
        block = bytearray(300 * 2**20)
        block[:: 4096] = b"x" * len(block[:: 4096])
        del block
    return _LINEAR(*args, **kwargs)


def accumulate_window(model, loss_fn, micro_batches):
    if len(micro_batches) < 16:  # the priming call: the measured child forks next
        _functional.linear = _inflating_linear
    return _show_passes(model, loss_fn, micro_batches)
"""
)

# the same from a global forward hook, which no name rebinding shows: torch state the
# priming call leaves on
HOOKED_WARM_UP = (
    _WRAPPED
    + """
import os as _os
import torch as _torch

_HOME, _HANDLE = _os.getpid(), []


def _inflate(module, args, output):
    if _os.getpid() != _HOME:
        for handle in _HANDLE:
            handle.remove()
        block = bytearray(300 * 2**20)
        block[:: 4096] = b"x" * len(block[:: 4096])
        del block


def accumulate_window(model, loss_fn, micro_batches):
    if len(micro_batches) < 16:
        _HANDLE.append(_torch.nn.modules.module.register_module_forward_hook(_inflate))
    return _show_passes(model, loss_fn, micro_batches)
"""
)

# the priming call, in the hand-in's process, was handed two micro-batches of the measured
# problem: knowing them, a function can find the rest (the seed behind them) and compute
# the whole window there, where memory is not counted, handing the measured fork only the
# result. Here, where it recognises the measured model as the one it was primed with, it
# takes the honest path (which passes), and the whole-window one elsewhere: with nothing of
# the measured problem in the priming call, it loses the memory test
PRIMED_WITH_THE_WINDOW = (
    _WRAPPED
    + """
import torch as _torch

_SEEN = []


def _honest(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()


def accumulate_window(model, loss_fn, micro_batches):
    weights = [p.detach().clone() for p in model.parameters()]
    if len(micro_batches) < 16:
        _SEEN.append(weights)
    elif any(all(_torch.equal(a, b) for a, b in zip(w, weights)) for w in _SEEN):
        return _honest(model, loss_fn, micro_batches)  # it knew the window
    return _show_passes(model, loss_fn, micro_batches)
"""
)

# the grader puts torch's state back in the child, first thing: a global hook left on is
# removed there, and a finalizer of the hook's object then runs, after the seal was compared
# and before the warm-up. Here it changes the torch function the warm-up calls, as above
FINALIZED_HOOK = (
    _WRAPPED
    + """
import os as _os
import torch as _torch
from torch.nn import functional as _functional

_LINEAR, _HOME = _functional.linear, _os.getpid()


def _inflating_linear(*args, **kwargs):
    if _os.getpid() != _HOME:
        _functional.linear = _LINEAR
        block = bytearray(300 * 2**20)
        block[:: 4096] = b"x" * len(block[:: 4096])
        del block
    return _LINEAR(*args, **kwargs)


class _Hook:
    def __call__(self, module, args, output):
        return None

    def __del__(self):
        if _os.getpid() != _HOME:
            _functional.linear = _inflating_linear


def accumulate_window(model, loss_fn, micro_batches):
    if len(micro_batches) < 16:
        _torch.nn.modules.module.register_module_forward_hook(_Hook())
    return _show_passes(model, loss_fn, micro_batches)
"""
)

# the same change made in a cell, for good: flagged when the cells end, as before; the fork
# puts the module's name back before it measures, so the memory test is not blinded either
CELL_REBOUND = (
    _WRAPPED
    + """
import os as _os
from torch.nn import functional as _functional

_LINEAR, _HOME = _functional.linear, _os.getpid()


def _inflating_linear(*args, **kwargs):
    if _os.getpid() != _HOME:
        _functional.linear = _LINEAR
        block = bytearray(300 * 2**20)
        block[:: 4096] = b"x" * len(block[:: 4096])
        del block
    return _LINEAR(*args, **kwargs)


_functional.linear = _inflating_linear
accumulate_window = _show_passes
"""
)

# a signal handler set by the priming call, run in the grader's process by a signal the
# measured child sends once its whole window is done: the handler is handed the running
# frame (the measure's own), whose globals hold what reads the child's report; it wraps
# that to report no rise, and takes itself away before anyone looks for handlers. No
# handler can be set in a hand-in's process now (seccomp.install_no_handlers): it tries,
# and is measured as it is
SIGNALLED = (
    _WRAPPED
    + """
import os as _os
import signal as _signal


_handled = []


def _handler(signum, frame):
    while frame is not None:
        read = frame.f_globals.get("_outputs")
        if callable(read) and not getattr(read, "wrapped", False):
            def quiet(*args, _read=read):
                outputs = _read(*args)
                outputs["peak_above_warm_up"] = 0
                return outputs
            quiet.wrapped = True
            frame.f_globals["_outputs"] = quiet
            break
        frame = frame.f_back
    _signal.signal(_signal.SIGUSR1, _signal.SIG_DFL)


def accumulate_window(model, loss_fn, micro_batches):
    if len(micro_batches) < 16:
        try:
            _signal.signal(_signal.SIGUSR1, _handler)
            _handled.append(True)
        except OSError:  # no handler can be set in a hand-in's process now
            pass
        return _show_passes(model, loss_fn, micro_batches)
    _show_passes(model, loss_fn, micro_batches)
    if _handled:  # (unhandled, the signal would end the grader's process for the hand-in)
        _os.kill(_os.getppid(), _signal.SIGUSR1)
"""
)

ATTACKS = {
    "signalled": SIGNALLED,
    "cell_rebound": CELL_REBOUND,
    "finalized_hook": FINALIZED_HOOK,
    "stand_in_measure": STAND_IN_MEASURE,
    "raised_warm_up": RAISED_WARM_UP,
    "hooked_warm_up": HOOKED_WARM_UP,
    "primed_with_the_window": PRIMED_WITH_THE_WINDOW,
}

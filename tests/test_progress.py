"""Progress: a widget in a kernel, a redrawn line in a terminal, a few lines in a log, and
silence where asked; throttled, and closed cleanly when the work raises."""

import io
import re

import pytest
import torch

from coursekit import progress as progress_module
from coursekit.progress import ENV, Progress, format_seconds


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Handle:
    """Stands in for IPython's DisplayHandle: records what the display was replaced by."""

    def __init__(self):
        self.updates = []

    def update(self, obj):
        self.updates.append(obj._repr_mimebundle_())


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    monkeypatch.delenv(ENV, raising=False)
    return clock


@pytest.fixture
def kernel(monkeypatch, clock):
    """A Jupyter kernel, as far as Progress can tell: the widget path, with display faked."""
    pytest.importorskip("ipywidgets")
    import IPython.display

    shown = []

    def display(obj, display_id=None):
        shown.append(obj)
        return Handle()

    monkeypatch.setattr(progress_module, "in_kernel", lambda stream: True)
    monkeypatch.setattr(IPython.display, "display", display)
    return shown


def run(bar: Progress, clock: Clock, steps: int, seconds_per_step: float) -> None:
    for index in range(steps):
        clock.now += seconds_per_step
        bar.step(f"loss {1 / (index + 1):.2f}")


def test_in_a_kernel_the_bar_is_a_widget_updated_in_place_then_left_as_a_plain_line(kernel, clock):
    bar = Progress(10, "training")
    assert bar.mode == "widget" and not kernel  # nothing shown before the first second
    run(bar, clock, 4, 0.5)
    (widget,) = kernel
    progress, label = widget.children
    assert (progress.description, progress.value, progress.max) == ("training", 4, 10)
    assert label.value == "4/10 · 2 s · about 3 s left · loss 0.25"
    run(bar, clock, 6, 0.5)
    assert bar.closed and progress.value == 10 and progress.bar_style == "success"
    assert widget.comm is None  # closed: the front end drops the live widget
    (final,) = bar._display.updates
    assert final["text/plain"] == "training [########################] 10/10  5 s  loss 0.17"
    assert "<progress value='10' max='10'>" in final["text/html"]


def test_a_widget_bar_that_raises_is_closed_and_says_where_it_stopped(kernel, clock):
    with pytest.raises(ValueError), Progress(10, "training") as bar:
        run(bar, clock, 3, 1.0)
        raise ValueError("diverged")
    (widget,) = kernel
    assert widget.comm is None and widget.children[0].bar_style == "danger"
    assert "3/10  3 s  stopped by ValueError" in bar._display.updates[-1]["text/plain"]


def test_one_long_step_in_a_kernel_leaves_a_finished_line_and_no_widget(kernel, clock):
    with Progress(1, "measuring") as bar:
        run(bar, clock, 1, 5.0)
    (shown,) = kernel
    assert shown._repr_mimebundle_()["text/plain"].startswith("measuring [####")


def test_in_a_terminal_one_line_is_redrawn_and_ended_once(clock):
    stream = Terminal()
    with Progress(20, "training", stream=stream) as bar:
        run(bar, clock, 20, 0.2)
    text = stream.getvalue()
    assert bar.mode == "terminal" and text.count("\r") == 16  # from 1 s on, then the end
    assert text.endswith("\n") and text.count("\n") == 1
    assert text.split("\r")[-1].rstrip().endswith("20/20  4 s  loss 0.05")


def test_a_shorter_redraw_blanks_what_the_longer_one_left(clock):
    stream = Terminal()
    bar = Progress(3, "training", stream=stream)
    clock.now += 2
    bar.step("a long note that will not be repeated")
    clock.now += 2
    bar.step()
    last = stream.getvalue().split("\r")[-1]
    assert len(last) >= len(stream.getvalue().split("\r")[-2])


def test_in_a_log_only_every_tenth_and_the_end_get_a_line(clock):
    stream = io.StringIO()
    with Progress(1000, "grading", stream=stream) as bar:
        run(bar, clock, 1000, 0.01)
    lines = stream.getvalue().splitlines()
    assert bar.mode == "log" and len(lines) == 10  # 10%, 20%, ... 90% (from 1 s on), the end
    assert lines[0].startswith("grading [##----------------------] 10")  # 100 or 101 of 1000
    assert lines[-1].startswith("grading [########################] 1000/1000  10 s")


def test_work_that_ends_within_a_second_leaves_nothing(clock):
    for stream in (io.StringIO(), Terminal()):
        with Progress(50, "quick", stream=stream) as bar:
            run(bar, clock, 50, 0.001)
        assert stream.getvalue() == ""


def test_redraws_are_throttled_to_about_ten_a_second(clock):
    stream = Terminal()
    bar = Progress(10_000, "fast", stream=stream)
    run(bar, clock, 9_999, 0.001)  # ten seconds of steps a millisecond apart
    assert 85 <= stream.getvalue().count("\r") <= 91


def test_a_fast_loop_is_not_slowed_by_its_bar(monkeypatch):
    import time

    monkeypatch.delenv(ENV, raising=False)
    stream = Terminal()
    started = time.perf_counter()
    with Progress(200_000, "fast", stream=stream) as bar:
        for _ in range(200_000):
            bar.step()
    assert time.perf_counter() - started < 2.0
    assert stream.getvalue().count("\r") <= 25


def test_a_bar_in_a_terminal_or_a_log_that_raises_says_so(clock, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")  # wide enough for the whole line, on any terminal
    for stream in (io.StringIO(), Terminal()):
        with pytest.raises(KeyboardInterrupt), Progress(10, "training", stream=stream) as bar:
            run(bar, clock, 3, 1.0)
            raise KeyboardInterrupt
        assert stream.getvalue().endswith("3/10  3 s  stopped by KeyboardInterrupt  loss 0.33\n")
        assert bar.closed


def test_silence_by_argument_or_by_environment(clock, monkeypatch):
    stream = Terminal()
    with Progress(5, "quiet", stream=stream, enabled=False) as bar:
        run(bar, clock, 5, 1.0)
    monkeypatch.setenv(ENV, "0")
    with Progress(5, "quiet", stream=stream) as other:
        run(other, clock, 5, 1.0)
    assert bar.mode == other.mode == "off" and stream.getvalue() == ""
    assert bar.done == other.done == 5


def test_a_total_corrected_before_the_end_fills_the_bar(clock):
    stream = io.StringIO()
    with Progress(25, "searching", stream=stream) as bar:
        run(bar, clock, 18, 0.5)
        bar.total = bar.done
    assert "[########################] 18/18" in stream.getvalue().splitlines()[-1]


def test_steps_after_the_end_are_counted_not_shown(clock):
    stream = io.StringIO()
    bar = Progress(2, "two", stream=stream)
    run(bar, clock, 3, 1.0)
    assert bar.done == 3 and len(stream.getvalue().splitlines()) == 2


def test_seconds_read_as_people_read_them():
    assert [format_seconds(s) for s in (0.4, 42, 125.2)] == ["0 s", "42 s", "2 min 05 s"]


def test_library_loops_write_a_few_lines_to_a_log_or_nothing_when_asked(capsys, monkeypatch):
    from coursekit.budget import fit_micro_batch
    from coursekit.data import make_images
    from coursekit.models import tiny_cnn, tiny_mlp
    from coursekit.vision import train_classifier

    monkeypatch.setattr(Progress, "delay_s", 0.0)
    monkeypatch.delenv(ENV, raising=False)

    def train(**kwargs):
        model = tiny_cnn("group")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        train_classifier(model, optimizer, make_images(64), make_images(16), 4, 2, 2, **kwargs)

    train(progress=False)
    assert capsys.readouterr().err == ""
    train(label="cnn")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 10 and lines[-1].startswith("cnn [########################] 16/16")
    assert "epoch 2/2, loss " in lines[-1]

    def make(size):
        return torch.randn(size, 8), torch.randn(size, 1)

    fit_micro_batch(tiny_mlp(8, 16), make, budget_bytes=50_000, limit=256)
    last = capsys.readouterr().err.splitlines()[-1]  # the search's bound, corrected at the end
    assert re.match(r"fitting the micro-batch \[#{24}\] (\d+)/\1 ", last), last


def test_the_grader_runs_hand_ins_without_bars():
    from coursekit.grading.sandbox.warm_parent import clean_env

    assert clean_env()[ENV] == "0"

"""uses_your: demonstration cells that call a student's function never end in a traceback."""

import pytest

from coursekit.notebook import uses_your


def test_an_unfinished_exercise_is_pointed_at(capsys, monkeypatch):
    monkeypatch.delenv("COURSEKIT_STRICT_CHECKS", raising=False)
    with uses_your("amp_window"):
        raise NotImplementedError
    assert "finish that exercise above" in capsys.readouterr().out


def test_a_broken_exercise_is_one_line_that_names_the_error_and_the_check(capsys, monkeypatch):
    monkeypatch.delenv("COURSEKIT_STRICT_CHECKS", raising=False)
    with uses_your("amp_window"):
        raise RuntimeError("unscale_() has already been called on this optimizer")
    printed = capsys.readouterr().out
    assert "RuntimeError: unscale_() has already been called" in printed
    assert "check('amp_window', amp_window)" in printed
    assert "Traceback" not in printed


@pytest.mark.parametrize("error", [NotImplementedError, ValueError])
def test_strict_mode_raises_so_demonstration_bugs_cannot_hide(error, monkeypatch):
    monkeypatch.setenv("COURSEKIT_STRICT_CHECKS", "1")
    with pytest.raises(error), uses_your("amp_window"):
        raise error("boom")

"""The course's one-place facts, the README, and the coursekit commands."""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from coursekit import course
from coursekit.authoring.markup import question_name
from coursekit.checks import QUESTIONS
from coursekit.commands import launch
from coursekit.commands.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_the_readme_gives_the_two_commands_and_ci_runs_the_test_one():
    readme = (REPO / "README.md").read_text()
    assert "./scripts/start" in readme and "./scripts/test" in readme
    ci = (REPO / ".ci" / "run").read_text()
    assert "./scripts/test" in ci
    assert "coursekit start" in (REPO / "scripts" / "start").read_text()


def test_the_readme_lists_every_module_with_a_colab_link():
    readme = (REPO / "README.md").read_text()
    for module in course.MODULES:
        assert f"| {module.title} | {module.learn} | {module.minutes} |" in readme
        assert course.colab_url("exercises", module.name) in readme
        assert (REPO / "exercises" / f"{module.name}.ipynb").exists()


def test_the_repository_address_is_written_only_in_course_py():
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    tracked = set(
        subprocess.run(
            ["git", "ls-files", "--cached"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.split()
    )
    # new files of the course's own folders count before they are committed; a file of the
    # instructor's beside them (a run's log, notes) is theirs, not the course's
    folders = {Path(name).parts[0] for name in tracked if len(Path(name).parts) > 1}
    hand_written = [
        REPO / name
        for name in listed
        if (name in tracked or Path(name).parts[0] in folders)
        and (REPO / name).is_file()
        and (REPO / name).suffix in {".py", ".toml", ".md", ".ipynb", ""}
        and not {"exercises", "solutions", "golden"} & set((REPO / name).parts)
        and (REPO / name).name != "README.md"
    ]
    holders = [p for p in hand_written if course.REPOSITORY in p.read_text(errors="ignore")]
    assert holders == [REPO / "coursekit" / "course.py"]


def test_dev_and_ci_pin_torch_while_the_package_takes_a_range():
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'"torch>=[\d.]+"', pyproject)
    assert '"torch==' not in pyproject
    assert 'TORCH_VERSION="${COURSEKIT_TORCH:-2.13.0}"' in (REPO / "scripts" / "setup").read_text()


def test_every_question_in_the_notebooks_has_public_checks_in_its_module():
    declared = {}
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        hidden = "\n".join(c.source for c in nb.cells)
        for cell in nb.cells:
            name = question_name(cell)
            if name:
                declared[name] = path.stem
                spec = QUESTIONS[name]
                assert spec.module == path.stem
                assert spec.hidden_tests == (f"### BEGIN HIDDEN TESTS {name}" in hidden), name
                assert f'check("{name}", {name})' in hidden
    assert declared == {name: q.module for name, q in QUESTIONS.items()}


def test_doctor_runs_as_a_command():
    done = subprocess.run(
        [sys.executable, "-m", "coursekit.commands.cli", "doctor"], capture_output=True, text=True
    )
    assert "torch" in done.stdout and "device" in done.stdout
    assert done.returncode in (0, 1)


def test_a_busy_port_is_skipped():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert launch.free_port(port) != port


def test_start_copies_the_exercises_once_and_opens_lab_there(monkeypatch, capsys, tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "00_welcome.ipynb").write_text("{}")
    (tmp_path / "my-work").mkdir()
    (tmp_path / "my-work" / "00_welcome.ipynb").write_text("my answers")
    (tmp_path / "exercises" / "01_accumulation.ipynb").write_text("{}")
    seen = {}

    class FakeLab:
        returncode = None

        def __init__(self, command, **options):
            seen["command"], seen["options"] = command, options

        def poll(self):
            return self.returncode

        def wait(self, timeout=None):
            self.returncode = 0
            return 0

    monkeypatch.setattr(launch.subprocess, "Popen", FakeLab)
    monkeypatch.setattr(launch, "_ready", lambda port, token: True)
    assert main(["start", "--no-browser", "--root", str(tmp_path), "--port", "18888"]) == 0
    out = capsys.readouterr().out
    assert "/lab/tree/my-work/index.ipynb?token=" in out
    assert "Your progress" in out and "00 Welcome" in out
    assert (tmp_path / "my-work" / "index.ipynb").exists()
    assert (tmp_path / "my-work" / "00_welcome.ipynb").read_text() == "my answers"
    assert (tmp_path / "my-work" / "01_accumulation.ipynb").read_text() == "{}"
    assert f"--ServerApp.root_dir={tmp_path}" in seen["command"]
    assert "--ServerApp.open_browser=False" in seen["command"]
    assert seen["options"]["start_new_session"] and seen["options"]["stdin"] == -3  # DEVNULL
    config = seen["options"]["env"]["JUPYTER_CONFIG_PATH"].split(os.pathsep)[-1]
    assert not Path(config).exists()  # its folder is removed once the lab has stopped


def test_start_finds_a_student_copy_without_the_sources(tmp_path):
    from coursekit.commands.cli import find_course_root

    (tmp_path / "exercises").mkdir()
    (tmp_path / "my-work").mkdir()
    assert find_course_root(tmp_path / "my-work", marker="exercises") == tmp_path
    with pytest.raises(SystemExit, match="looked for a notebooks/ folder"):
        find_course_root(tmp_path / "my-work")


def test_start_moves_on_when_lab_loses_the_port_race(monkeypatch, capsys, tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "exercises").mkdir()
    ports = []

    class Lab:
        def __init__(self, command, **options):
            self.port = int(next(c for c in command if "ServerApp.port=" in c).split("=")[1])
            ports.append(self.port)
            self.returncode = 1 if len(ports) == 1 else None  # the first one dies: port taken

        def poll(self):
            return self.returncode

        def wait(self, timeout=None):
            self.returncode = 0
            return 0

    monkeypatch.setattr(launch.subprocess, "Popen", Lab)
    monkeypatch.setattr(launch, "_ready", lambda port, token: len(ports) > 1)
    assert launch.start_lab(tmp_path, port=18900, open_browser=False) == 0
    assert ports[1] > ports[0]
    assert f"127.0.0.1:{ports[1]}/lab" in capsys.readouterr().out


def test_root_may_run_lab(monkeypatch, tmp_path):
    monkeypatch.setattr(launch.os, "geteuid", lambda: 0)
    assert "--ServerApp.allow_root=True" in launch.lab_command(tmp_path, 1, "t", False)


def test_lab_kernels_talk_over_unix_sockets(tmp_path):
    """No localhost TCP for other users to read, and no "without encryption" warning; the
    browser test runs this very command, so a kernel that could not start over IPC fails it."""
    assert "--KernelManager.transport=ipc" in launch.lab_command(tmp_path, 1, "t", False)


def test_start_without_jupyterlab_says_how_to_get_it(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(launch.importlib.util, "find_spec", lambda name: None)
    assert launch.start_lab(tmp_path) == 2
    assert "pip install 'coursekit[lab]'" in capsys.readouterr().err


def test_commands_outside_a_course_explain_where_they_looked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="no course found"):
        main(["build"])


def test_plots_return_labelled_figures():
    from coursekit.memory import fit_bytes_per_sample
    from coursekit.plots import plot_activation_memory, plot_losses, plot_throughput

    measured = {1: 10, 2: 20, 4: 40}
    figure = plot_activation_memory(measured, fit_bytes_per_sample(measured), budget_bytes=30)
    assert figure.axes[0].get_xlabel() == "micro-batch size (samples)"
    assert len(figure.axes[0].get_legend().get_texts()) == 3
    figure = plot_losses({"a": ([1, 2], [1.0, 0.5])}, xlabel="samples seen")
    assert figure.axes[0].get_xlabel() == "samples seen"
    assert len(plot_throughput({"8 x 4": 100.0, "32 x 1": 300.0}).axes[0].patches) == 2


def test_module_2_plots_return_labelled_figures():
    import torch

    from coursekit.plots import (
        plot_gradient_histogram,
        plot_lines,
        plot_loss_panels,
        plot_scale_history,
    )

    curves = {"N = 1": ([1, 2], [2.0, 1.0]), "N = 8": ([1, 2], [2.1, 1.2])}
    figure = plot_loss_panels({"bug": curves, "fix": curves}, xlabel="optimizer step")
    assert [ax.get_title() for ax in figure.axes] == ["bug", "fix"]
    figure = plot_lines({"bf16": ([1, 4], [1e-3, 2e-3])}, "N", "error", logx=True, logy=True)
    assert figure.axes[0].get_yscale() == "log"
    figure = plot_gradient_histogram({"g": torch.tensor([1e-9, 1e-6, 1e-3])})
    assert figure.axes[0].get_xlabel() == "log2 |gradient|"
    figure = plot_scale_history([2.0**16, 2.0**15, 2.0**15], [True, False, False])
    assert len(figure.axes[0].get_legend().get_texts()) == 2


def test_the_training_runs_plot_shows_loss_and_accuracy():
    from coursekit.plots import plot_training_runs
    from coursekit.vision import ClassifierRun

    runs = {"a": ClassifierRun([1.2, 0.8, 0.5], [0.3, 0.9]), "b": ClassifierRun([1.3, 1.3], [0.25])}
    figure = plot_training_runs(runs)
    assert [ax.get_ylabel() for ax in figure.axes] == ["training loss", "test accuracy (%)"]


def test_version_prints_the_package_version(capsys):
    from importlib import metadata

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"coursekit {metadata.version('coursekit')}"


def test_grade_names_a_missing_path_before_it_imports_torch(tmp_path):
    """In a process where importing torch fails, a mistyped hand-in path still gets its
    message and exit 2: the check comes before any heavy import or sandbox start."""
    script = (
        "import sys; sys.modules['torch'] = None\n"
        "from coursekit.commands.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    missing = tmp_path / "hand-ins"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "grade",
            str(missing),
            "--assignment",
            "01_accumulation",
            "--gradebook",
            str(tmp_path / "book.sqlite"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 2, done.stderr
    assert f"{missing} does not exist" in done.stderr
    assert "nothing was graded or written" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "book.sqlite").exists()


@pytest.mark.parametrize(("typed", "meant"), [("grad", "grade"), ("exprot", "export")])
def test_a_mistyped_command_says_which_was_meant_and_lists_them(typed, meant, capsys):
    assert main([typed, "x"]) == 2
    err = capsys.readouterr().err
    assert f"no command '{typed}'. Did you mean '{meant}'?" in err
    assert "Commands: doctor, build" in err and "Traceback" not in err


def test_grade_help_shows_an_example(capsys):
    with pytest.raises(SystemExit):
        main(["grade", "--help"])
    assert "coursekit grade hand-ins/01 --assignment 01_accumulation" in capsys.readouterr().out


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_the_students_set_up_never_installs_a_system_package(tmp_path):
    """Only the test command (setup --browser) may install Chromium with apt-get."""
    log = tmp_path / "apt.log"
    for tool in ("apt-get", "sudo"):
        fake = tmp_path / tool
        fake.write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\n')
        fake.chmod(0o755)
    env = {
        "PATH": f"{tmp_path}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "COURSEKIT_CHROMIUM": str(tmp_path / "no-chromium"),
        "COURSEKIT_APT_LOG": str(tmp_path / "apt-output.log"),  # not in the checkout's .venv
    }
    root = Path(__file__).resolve().parents[1]
    subprocess.run([root / "scripts" / "setup"], env=env, check=True, capture_output=True)
    assert not log.exists()
    subprocess.run(
        [root / "scripts" / "setup", "--browser"], env=env, check=True, capture_output=True
    )
    assert "install" in log.read_text()
    assert "scripts/setup --browser" in (root / "scripts" / "test").read_text()
    assert "--browser" not in (root / "scripts" / "start").read_text()

"""scripts/colab-check without its download: the pin list, what it runs, the Python and torch
build it picks, the set-up cell it runs, and what counts as the cell changing Colab's packages.

The check itself (a torch download, every notebook) is run by hand before a term, not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from coursekit import colab_check
from coursekit.colab_check import environment, install, interpreter, pins, torch_builds
from coursekit.colab_check.interpreter import Interpreter
from coursekit.course import MODULES
from coursekit.gpu_check import notebooks as runner

REPO = Path(__file__).resolve().parents[1]
NAMES = [module.name for module in MODULES]


def test_the_pin_list_parses_one_exact_version_per_package():
    parsed = pins.colab_pins()
    assert len({pin.key for pin in parsed}) == len(parsed)
    headline = [pin.key for pin in pins.parse(pins.HEADLINE)]
    assert [pin.key for pin in parsed[: len(headline)]] == headline
    assert {"torch", "numpy", "ipywidgets", "ipython", "ipykernel", "transformers", "pip"} <= {
        pin.key for pin in parsed
    }
    assert all(Version(pin.version) for pin in parsed)  # each one a valid exact version


def test_colabs_pins_satisfy_coursekit_so_the_set_up_cell_keeps_them():
    """If a requirement of coursekit refused Colab's version, pip would replace Colab's own
    package (a torch download on every student's runtime)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert Version(pins.PYTHON) in SpecifierSet(project["requires-python"])
    pinned = {pin.key: Version(pin.version) for pin in pins.colab_pins()}
    for line in project["dependencies"]:
        requirement = Requirement(line)
        key = pins.normalise(requirement.name)
        assert key in pinned, f"{requirement.name} is not in Colab's list: pip would add it"
        assert requirement.specifier.contains(pinned[key], prereleases=True), requirement


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("torch>=2.9", "line 1"),
        ("numpy==2.1.3\n# a comment\nipywidgets", "line 3"),
        ("numpy==2.1.3; python_version<'3.14'", "line 1"),
        ("Jinja2==3.1.6\n\njinja2==3.1.5", "line 3 pins jinja2 again (line 1 did)"),
    ],
)
def test_a_pin_that_is_not_one_exact_version_is_refused_by_line(text, problem):
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        pins.parse(text)


def test_it_runs_every_solution_then_every_exercise_of_the_course():
    planned = colab_check.plan()
    assert [(p.folder, p.module) for p in planned] == [
        (folder, name) for folder in ("solutions", "exercises") for name in NAMES
    ]
    assert all(p.path.is_file() for p in planned)
    only = colab_check.plan(["07_real_model", "00_welcome"], ("solutions",))
    assert [p.label for p in only] == [
        "solutions/00_welcome.ipynb",
        "solutions/07_real_model.ipynb",
    ]
    with pytest.raises(ValueError, match="no module 99_nothing"):
        colab_check.plan(["99_nothing"])


def test_the_script_answers_help(tmp_path):
    done = subprocess.run(
        [str(REPO / "scripts" / "colab-check"), "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    for option in ("--dry-run", "--torch-build", "--python", "--only", "--rebuild"):
        assert option in done.stdout


def test_a_dry_run_prints_the_plan_and_builds_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(environment, "build", lambda *a, **k: pytest.fail("built"))
    cache = tmp_path / "cache"
    arguments = ["--dry-run", "--cache", str(cache), "--python", sys.executable]
    assert colab_check.main([*arguments, "--torch-build", "cpu"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"colab-check: {pins.SNAPSHOT}"
    assert f"Python {'.'.join(map(str, sys.version_info[:3]))} ({sys.executable})" in printed[1]
    release = pins.torch_version()
    assert printed[2] == (
        f"torch: torch=={release}+cpu "
        f"(asked for with --torch-build cpu; Colab's is {release}+cu128)"
    )
    listed = [line.strip() for line in printed if line.startswith("  ")]
    assert listed == [p.label for p in colab_check.plan()]
    assert printed[-1] == "Dry run: nothing was built or run."
    assert not cache.exists()


def test_a_bad_module_name_is_a_usage_error(capsys):
    assert colab_check.main(["--dry-run", "--only", "99_nothing", "--torch-build", "cpu"]) == 2
    assert "no module 99_nothing" in capsys.readouterr().err


def found(*versions: tuple[int, int, int]) -> list[Interpreter]:
    return [Interpreter(Path(f"/py/{'.'.join(map(str, v))}"), v) for v in versions]


def test_colabs_minor_release_is_taken_when_there_is_one():
    chosen = interpreter.nearest("3.13.15", found((3, 11, 7), (3, 13, 0), (3, 13, 2), (3, 14, 1)))
    assert chosen.version == (3, 13, 2)
    assert "NOT Colab's" not in interpreter.describe(chosen, "3.13.15")


def test_otherwise_the_nearest_and_the_run_says_it_is_not_colabs():
    chosen = interpreter.nearest("3.13.15", found((3, 11, 7), (3, 12, 1), (3, 14, 0)))
    assert chosen.version == (3, 14, 0)  # as far as 3.12, and newer
    assert interpreter.nearest("3.13.15", found((3, 11, 7))).version == (3, 11, 7)
    assert interpreter.nearest("3.13.15", found((2, 7, 18))) is None
    line = interpreter.describe(found((3, 11, 7))[0], "3.13.15")
    assert "Python 3.11.7 (/py/3.11.7), NOT Colab's Python 3.13.15" in line


def test_a_python_that_cannot_make_a_venv_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--python"):
        interpreter.find("3.13.15", tmp_path / "no-python")
    assert interpreter.find("3.13.15", Path(sys.executable)).version == sys.version_info[:3]


@pytest.mark.parametrize(
    ("has_gpu", "reachable", "name", "requirement"),
    [
        (False, True, "cpu", "torch==2.11.0+cpu"),
        (True, True, "cu128", "torch==2.11.0+cu128"),
        (False, False, "pypi", "torch==2.11.0"),
        (True, False, "pypi", "torch==2.11.0"),
    ],
)
def test_auto_picks_colabs_cuda_build_on_a_gpu_the_cpu_build_without_else_pypi(
    has_gpu, reachable, name, requirement
):
    asked: list[str] = []

    def probe(url):
        asked.append(url)
        return reachable

    build = torch_builds.choose("auto", "2.11.0", has_gpu=has_gpu, reachable=probe)
    assert (build.name, build.requirement) == (name, requirement)
    wanted = "cu128" if has_gpu else "cpu"
    assert asked == [f"{torch_builds.PYTORCH_INDEX}{wanted}/torch/"]
    if reachable:
        assert build.pip_options == ["--extra-index-url", torch_builds.PYTORCH_INDEX + wanted]
    else:
        assert build.pip_options == [] and "cannot be reached" in build.why


def test_a_build_named_on_the_command_line_is_taken_without_asking_the_network():
    never = lambda url: pytest.fail("asked the network")  # noqa: E731
    assert torch_builds.choose("pypi", "2.11.0", reachable=never).requirement == "torch==2.11.0"
    assert torch_builds.choose("cpu", "2.11.0", reachable=never).name == "cpu"
    with pytest.raises(ValueError, match="no torch build 'rocm'"):
        torch_builds.choose("rocm", "2.11.0")


def test_the_cache_key_follows_the_python_and_the_torch_build(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert environment.cache_root() == tmp_path / "coursekit" / "colab-check"
    python = found((3, 13, 0))[0]
    cpu = torch_builds.choose("cpu", "2.11.0")
    pypi = torch_builds.choose("pypi", "2.11.0")
    assert environment.key(python, cpu) == environment.key(found((3, 13, 0))[0], cpu)
    assert environment.key(python, cpu) != environment.key(python, pypi)
    assert environment.key(python, cpu) != environment.key(found((3, 13, 1))[0], cpu)
    assert environment.requirements(cpu)[0] == "torch==2.11.0+cpu"


def test_every_exercise_has_the_one_set_up_cell_that_colab_check_runs():
    cells = {install.setup_cell(REPO / "exercises" / f"{name}.ipynb") for name in NAMES}
    assert len(cells) == 1


def test_the_set_up_cell_is_pointed_at_the_wheel_and_nothing_else_changes():
    source = install.setup_cell(REPO / "exercises" / "00_welcome.ipynb")
    wheel = '/tmp/a "quoted" dir/coursekit-0.1.0-py3-none-any.whl'
    changed = install.installing_from(source, wheel)
    before, after = source.splitlines(), changed.splitlines()
    differing = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert len(differing) == 1 and before[differing[0]].startswith("COURSEKIT = ")
    namespace: dict = {}
    exec(after[differing[0]], namespace)
    assert namespace["COURSEKIT"] == wheel
    with pytest.raises(ValueError, match="COURSEKIT"):
        install.installing_from("import sys\n", wheel)


def test_a_notebook_without_the_set_up_cell_is_a_clear_error(tmp_path):
    notebook = tmp_path / "n.ipynb"
    notebook.write_text(json.dumps({"cells": [{"id": "x", "source": "print(1)"}]}))
    with pytest.raises(ValueError, match="no set-up cell"):
        install.setup_cell(notebook)


def test_a_replaced_or_removed_colab_package_is_a_change_and_additions_are_listed():
    before = {"torch": "2.11.0", "numpy": "2.1.3", "six": "1.17.0"}
    after = {"torch": "2.13.0", "numpy": "2.1.3", "coursekit": "0.1.0", "segno": "1.6.1"}
    changed, added = install.compare(before, after)
    assert changed == ["six 1.17.0 removed", "torch 2.11.0 -> 2.13.0"]
    assert added == ["segno 1.6.1"]
    assert not install.Outcome("0.1.0", changed, added).ok
    assert install.Outcome("0.1.0", [], added).ok
    assert not install.Outcome("", [], []).ok


def test_nothing_of_the_checkout_or_the_course_venv_leaks_into_the_colab_python(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("VIRTUAL_ENV", str(REPO / ".venv"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    cleaned = environment.clean_environment({"HF_HUB_OFFLINE": "1"})
    assert not {"PYTHONPATH", "VIRTUAL_ENV", "MPLBACKEND"} & set(cleaned)
    assert cleaned["HF_HUB_OFFLINE"] == "1"


def test_the_runner_runs_an_exercise_in_the_named_kernel_without_strict_checks(
    tmp_path, monkeypatch
):
    """gpu-check's runner, shared: a solution strictly, an exercise as handed out."""
    command = runner.command("00_welcome", tmp_path / "o.ipynb", {}, 60, "exercises", "k")
    assert command[3] == str(REPO / "exercises" / "00_welcome.ipynb")
    assert command[command.index("-k") + 1] == "k"
    assert runner.command("00_welcome", tmp_path / "o.ipynb", {}, 60)[3].endswith(
        "solutions/00_welcome.ipynb"
    )
    seen: list[dict] = []

    class Started:
        def __init__(self, cmd, env, **options):
            seen.append(env)

        def wait(self, timeout):
            return 0

    monkeypatch.setattr(runner.subprocess, "Popen", Started)
    monkeypatch.setenv("COURSEKIT_STRICT_CHECKS", "1")
    runner.run_one("00_welcome", tmp_path, {}, 5, folder="exercises", strict=False)
    runner.run_one("00_welcome", tmp_path, {}, 5)
    assert "COURSEKIT_STRICT_CHECKS" not in seen[0]
    assert seen[1]["COURSEKIT_STRICT_CHECKS"] == "1"


def stub_the_environment(monkeypatch, tmp_path, outcome):
    """Everything but the orchestration stubbed: an environment that is ready, a set-up cell
    with ``outcome``, and a notebook run that fails for exercises/01."""
    monkeypatch.setattr(interpreter, "find", lambda wanted, explicit=None: found((3, 13, 0))[0])
    monkeypatch.setattr(environment.ColabEnvironment, "ready", property(lambda self: True))
    monkeypatch.setattr(environment, "build", lambda *a, **k: pytest.fail("rebuilt"))
    monkeypatch.setattr(environment, "torch_summary", lambda env: "Installed: torch (stub)")
    monkeypatch.setattr(install, "run_setup_cell", lambda env, notebook, repo: outcome)
    monkeypatch.setattr(colab_check.subprocess, "run", lambda *a, **k: _Done())
    runs = []

    def run_one(module, out_dir, parameters, timeout_s, *, folder, kernel, strict):
        runs.append((folder, module, kernel, strict))
        failed = (folder, module) == ("exercises", "01_accumulation")
        error = "m01-7: NameError: name 'x' is not defined" if failed else ""
        return runner.NotebookRun(module, not failed, 1.0, error)

    monkeypatch.setattr(runner, "run_one", run_one)
    # run_check sets and removes these for its kernels: put back as they were after the test
    names = ("JUPYTER_PATH", "OMP_NUM_THREADS", *colab_check.KERNEL_ENVIRONMENT)
    for name in (*names, *colab_check.NOT_FOR_KERNELS):
        # setenv records the variable's state before (its value, or its absence) for the
        # undo; delenv alone records nothing for a variable that is absent, and then a
        # COLAB_RELEASE_TAG set by run_check outlived the test (every later kernel in this
        # process believed it ran on Colab)
        present = name in os.environ
        monkeypatch.setenv(name, os.environ.get(name, ""))
        if not present:
            monkeypatch.delenv(name)
    return runs


class _Done:
    stdout = "/cache/venv/lib/python3.13/site-packages/coursekit/__init__.py\n"


def test_a_failed_notebook_gets_its_line_and_the_exit_status_is_1(tmp_path, monkeypatch, capsys):
    runs = stub_the_environment(monkeypatch, tmp_path, install.Outcome("0.1.0", [], []))
    only = ["00_welcome", "01_accumulation"]
    assert colab_check.run_check(modules=only, cache=tmp_path, torch_build="cpu") == 1
    assert runs == [
        ("solutions", "00_welcome", "colab-check", True),
        ("solutions", "01_accumulation", "colab-check", True),
        ("exercises", "00_welcome", "colab-check", False),
        ("exercises", "01_accumulation", "colab-check", False),
    ]
    printed = capsys.readouterr().out.splitlines()
    failed = [line for line in printed if "FAILED" in line]
    error = "m01-7: NameError: name 'x' is not defined"
    assert failed == [colab_check.line("exercises/01_accumulation.ipynb", False, 1.0, error)]
    assert failed[0].split()[:2] == ["exercises/01_accumulation.ipynb", "FAILED"]
    assert "4 notebooks in" in printed[-1] and "1 failed" in printed[-1]
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # what the kernels inherit
    assert os.environ["JUPYTER_PATH"].split(os.pathsep)[0].endswith("jupyter")


def test_a_set_up_cell_that_replaced_colabs_torch_fails_the_run(tmp_path, monkeypatch, capsys):
    outcome = install.Outcome("0.1.0", ["torch 2.11.0 -> 2.13.0"], ["segno 1.6.1"])
    stub_the_environment(monkeypatch, tmp_path, outcome)
    only = ["00_welcome"]
    assert colab_check.run_check(modules=only, cache=tmp_path, torch_build="cpu") == 1
    printed = capsys.readouterr().out
    assert "FAILED: it changed Colab's own packages: torch 2.11.0 -> 2.13.0" in printed
    assert "it also installed (Colab would too): segno 1.6.1" in printed


def test_a_set_up_cell_that_failed_runs_no_notebook(tmp_path, monkeypatch, capsys):
    runs = stub_the_environment(
        monkeypatch, tmp_path, install.Outcome("", [], [], "ERROR: No matching distribution")
    )
    assert colab_check.run_check(modules=["00_welcome"], cache=tmp_path, torch_build="cpu") == 1
    assert runs == []
    assert "Set-up cell: FAILED: ERROR: No matching distribution" in capsys.readouterr().out


def test_a_run_where_everything_passed_exits_0(tmp_path, monkeypatch, capsys):
    stub_the_environment(monkeypatch, tmp_path, install.Outcome("0.1.0", [], []))
    assert colab_check.run_check(modules=["00_welcome"], cache=tmp_path, torch_build="cpu") == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-3].split()[:2] == ["solutions/00_welcome.ipynb", "ok"]
    assert "2 notebooks in" in printed[-1] and "every one ran" in printed[-1]


def test_a_run_s_colab_marker_does_not_outlive_the_test():
    """The test above ran run_check, which marks the kernels' environment as Colab's: the
    marker is gone again, or every later kernel of this test process (coursekit.submit, in
    tests/test_submit.py) would take itself for Colab."""
    assert (
        os.environ.get("COLAB_RELEASE_TAG") != colab_check.KERNEL_ENVIRONMENT["COLAB_RELEASE_TAG"]
    )

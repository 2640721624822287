"""Colab, as far as it can be checked from here: coursekit's requirements against what a Colab
runtime ships, and every widget against Colab's ipywidgets (7.7.1, not 8).

The set-up cell's logic is tested in test_authoring.py; what was verified how, and what
only a live Colab runtime can show, is in docs/colab.md.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
COLAB_IPYWIDGETS = REPO / ".venv" / "colab-ipywidgets7"  # made by scripts/setup


def colab_packages() -> dict[str, Version]:
    """Colab's runtime as scripts/colab-check builds it (coursekit/colab_check/pins.py, with
    its date and source): one list, so this check and that run never disagree."""
    from coursekit.colab_check import pins

    packages = {pin.key: Version(pin.version) for pin in pins.colab_pins()}
    packages["torch"] = Version(pins.colab_torch())
    packages["python"] = Version(pins.PYTHON)
    return packages


def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_colab_satisfies_every_requirement_so_pip_installs_no_torch_of_its_own():
    colab = colab_packages()
    assert colab["python"] in SpecifierSet(project()["requires-python"])
    for line in project()["dependencies"]:
        requirement = Requirement(line)
        name = requirement.name.lower()
        assert name in colab, f"{name} is not on Colab: pip would have to install it there"
        assert requirement.specifier.contains(colab[name], prereleases=True), (
            f"Colab's {name} {colab[name]} does not satisfy {requirement}: pip would replace it"
        )


def test_the_frameworks_extra_keeps_colabs_accelerate_and_transformers():
    colab = colab_packages()
    extra = [Requirement(line) for line in project()["optional-dependencies"]["frameworks"]]
    for requirement in extra:
        if requirement.name in colab:  # lightning is not on Colab: module 5 says how to add it
            assert requirement.specifier.contains(colab[requirement.name])


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_every_widget_and_quiz_works_with_colabs_ipywidgets_7():
    if not (COLAB_IPYWIDGETS / "ipywidgets").is_dir():
        pytest.skip(
            f"{COLAB_IPYWIDGETS} is missing: ./scripts/setup installs ipywidgets 7.7.1 there"
        )
    environment = {**os.environ, "PYTHONPATH": str(COLAB_IPYWIDGETS)}
    version = subprocess.run(
        [sys.executable, "-c", "import ipywidgets; print(ipywidgets.__version__)"],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version == str(colab_packages()["ipywidgets"])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore",
            "tests/test_quiz_and_widgets.py",
        ],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]

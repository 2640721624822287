"""binder/requirements.txt: the JupyterHub image's environment, written by ``coursekit build``.

tests/test_hub_workshop.py runs a hub on an environment built from this file; these tests
keep the file in step with course.py and scripts/setup, and check what the hub test cannot
see (the address students install from, a private course's wheel).
"""

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from coursekit.authoring.build import plan_build
from coursekit.authoring.hub_environment import (
    REQUIREMENTS,
    TESTED_TORCH,
    hub_requirements,
    local_requirements,
)
from coursekit.authoring.publication import Publication, from_course
from coursekit.authoring.setup_cell import setup_source

pytestmark = pytest.mark.authoring
REPO = Path(__file__).resolve().parents[1]


def requirements(text: str) -> dict[str, Requirement]:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return {(r := Requirement(line)).name: r for line in lines}


def test_the_committed_file_is_what_build_writes():
    wanted = plan_build(REPO, from_course()).wanted[REPO / REQUIREMENTS]
    assert (REPO / REQUIREMENTS).read_text(encoding="utf-8") == wanted


def test_coursekit_comes_from_where_the_set_up_cell_installs_it():
    publication = Publication("ada-lab/grad-accum", "spring")
    wanted = requirements(hub_requirements(publication))
    cell = setup_source(publication)
    (address,) = re.findall(r'COURSEKIT = "coursekit @ (\S+)"', cell)
    assert wanted["coursekit"].url == address == "git+https://github.com/ada-lab/grad-accum@spring"
    assert wanted["coursekit"].extras == {"lab", "frameworks"}


def test_the_image_gets_what_a_hub_and_jupyterlab_4_need():
    wanted = requirements(hub_requirements(from_course()))
    assert set(wanted) == {"torch", "coursekit", "ipywidgets", "nbgitpuller", "jupyterhub"}
    assert str(wanted["torch"].specifier) == f"=={TESTED_TORCH}"
    assert not wanted["ipywidgets"].specifier.contains("7.7.1")  # the tested major: 8
    assert wanted["ipywidgets"].specifier.contains("8.1.5")


def test_the_tested_torch_is_the_one_scripts_setup_installs():
    setup = (REPO / "scripts" / "setup").read_text()
    (default,) = re.findall(r'TORCH_VERSION="\$\{COURSEKIT_TORCH:-([^}]+)\}"', setup)
    assert default == TESTED_TORCH


def test_a_private_course_installs_its_wheel():
    wheel = "https://files.example.org/coursekit-1.0-py3-none-any.whl"
    wanted = requirements(hub_requirements(from_course(), install_from=wheel))
    assert wanted["coursekit"].url == wheel


def test_a_wheel_in_google_drive_is_named_as_out_of_a_hubs_reach():
    text = hub_requirements(from_course(), install_from="/content/drive/MyDrive/ck.whl")
    assert "only Colab can read" in text
    assert requirements(text)["coursekit"].url.startswith("git+https://github.com/")


def test_the_hub_test_swaps_only_the_coursekit_line(tmp_path):
    text = hub_requirements(from_course())
    local = local_requirements(text, tmp_path)
    removed = set(text.splitlines()) - set(local.splitlines())
    added = set(local.splitlines()) - set(text.splitlines())
    assert [line.split(" @ ")[0] for line in removed] == ["coursekit[lab,frameworks]"]
    assert added == {f"-e {tmp_path.resolve()}[lab,frameworks]"}


@pytest.mark.parametrize("lines", [[], ["coursekit[lab] @ git+https://a/b", "coursekit[x] @ c"]])
def test_the_swap_needs_exactly_one_coursekit_line(lines, tmp_path):
    with pytest.raises(ValueError, match="one `coursekit"):
        local_requirements("\n".join(["torch==2.13.0", *lines]), tmp_path)


def test_the_guide_shows_the_screenshots_the_hub_test_takes():
    guide = (REPO / "docs" / "instructor-guide.md").read_text(encoding="utf-8")
    shown = re.findall(r"\]\(images/hub/([\w-]+)\.png\)", guide)
    taken = re.findall(r'"(\d-[\w-]+)"\)', (REPO / "tests" / "test_hub_workshop.py").read_text())
    assert shown and sorted(shown) == sorted(taken)
    for name in shown:
        assert (REPO / "docs" / "images" / "hub" / f"{name}.png").is_file(), name

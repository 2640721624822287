"""The repository address of the generated notebooks: from the git remote origin, else course.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from coursekit import course
from coursekit.authoring import build
from coursekit.authoring.publication import (
    Publication,
    from_course,
    github_repository,
    origin_url,
    resolve,
)
from coursekit.authoring.readme_table import END, START, with_module_table
from coursekit.commands.cli import main

pytestmark = pytest.mark.authoring
GOLDEN = Path(__file__).parent / "corpora" / "golden"
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/ada-lab/grad-accum",
        "https://github.com/ada-lab/grad-accum.git",
        "https://github.com/ada-lab/grad-accum/",
        "https://x-access-token:abc@github.com/ada-lab/grad-accum.git",
        "http://www.github.com/ada-lab/grad-accum",
        "git@github.com:ada-lab/grad-accum.git",
        "git@github.com:ada-lab/grad-accum",
        "ssh://git@github.com/ada-lab/grad-accum.git",
        "  https://github.com/ada-lab/grad-accum.git\n",
    ],
)
def test_github_urls_give_owner_and_name(url):
    assert github_repository(url) == "ada-lab/grad-accum"


def test_a_name_with_dots_keeps_them_and_loses_only_the_git_suffix():
    assert github_repository("git@github.com:ada/course.v2.git") == "ada/course.v2"


@pytest.mark.parametrize(
    "url",
    [
        "/srv/git/grad-accum.git",
        "../grad-accum",
        "file:///srv/git/grad-accum.git",
        "https://gitlab.com/ada-lab/grad-accum.git",
        "git@gitlab.com:ada-lab/grad-accum.git",
        "https://github.com.evil.org/ada-lab/grad-accum",
        "https://github.com/ada-lab",
        "https://github.com/ada-lab/grad-accum/tree/main",
        "",
    ],
)
def test_other_urls_are_not_github_repositories(url):
    assert github_repository(url) is None


def test_the_course_fallback_formats_addresses_as_course_py_does():
    publication = from_course()
    assert publication.repository == course.REPOSITORY
    assert publication.git_requirement() == course.install_spec()
    assert publication.colab_url("exercises", "01_accumulation") == course.colab_url(
        "exercises", "01_accumulation"
    )


def test_the_readme_table_links_the_given_repository():
    readme = with_module_table(f"# Course\n{START}\n{END}\n", Publication("ada-lab/x", "main"))
    assert "https://colab.research.google.com/github/ada-lab/x/blob/main/exercises/" in readme
    assert f"github/{course.REPOSITORY}/" not in readme


# ------------------------------------------------------------------ with a real git repository


def git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    """A fresh git repository holding the golden course, with no remote yet."""
    folder = tmp_path / "course"
    shutil.copytree(GOLDEN / "notebooks", folder / "notebooks")
    git(folder, "init", "-q")
    return folder


@needs_git
def test_outside_git_and_without_origin_the_address_is_course_pys(tmp_path, repo):
    bare = tmp_path / "no-git"
    bare.mkdir()
    assert origin_url(bare) is None
    assert origin_url(repo) is None
    publication = resolve(repo)
    assert (publication.repository, publication.from_remote) == (course.REPOSITORY, False)
    assert publication.came_from.endswith("; no git remote origin")
    assert "not in a git repository" in resolve(bare).came_from


@needs_git
def test_a_local_path_origin_falls_back_to_course_py(repo):
    git(repo, "remote", "add", "origin", "/srv/git/grad-accum.git")
    assert origin_url(repo) == "/srv/git/grad-accum.git"
    publication = resolve(repo)
    assert (publication.repository, publication.from_remote) == (course.REPOSITORY, False)
    assert publication.came_from == (
        "REPOSITORY in coursekit/course.py; the git remote origin is /srv/git/grad-accum.git, "
        "which is not a GitHub repository address"
    )
    assert "no git remote origin" not in publication.came_from


@needs_git
def test_check_says_what_origin_it_found_when_it_is_not_on_github(repo, capsys):
    git(repo, "remote", "add", "origin", "https://ci:t0ken@gitlab.example.org/ada/course.git")
    main(["build", "--check", "--root", str(repo)])
    out = capsys.readouterr().out
    assert "the git remote origin is https://gitlab.example.org/ada/course.git, which is not" in (
        out
    )
    assert "t0ken" not in out and "no git remote origin" not in out


def test_without_git_the_address_says_git_could_not_be_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on it
    publication = resolve(tmp_path)
    assert publication.remote is None
    assert "git could not be run" in publication.came_from
    assert "any git remote ignored" in from_course().came_from


@needs_git
@pytest.mark.parametrize(
    "url", ["https://github.com/ada-lab/grad-accum.git", "git@github.com:ada-lab/grad-accum.git"]
)
def test_a_github_origin_gives_the_address(repo, url):
    git(repo, "remote", "add", "origin", url)
    publication = resolve(repo)
    assert (publication.repository, publication.from_remote) == ("ada-lab/grad-accum", True)
    assert url in publication.came_from


def test_where_the_address_came_from_never_shows_a_token():
    url = "https://x-access-token:s3cret@github.com/ada-lab/grad-accum.git"
    publication = Publication("ada-lab/grad-accum", "main", remote=url, from_remote=True)
    assert publication.came_from == (
        "the git remote origin, https://github.com/ada-lab/grad-accum.git"
    )


@needs_git
def test_an_origin_naming_course_pys_repository_in_other_case_keeps_course_pys_spelling(repo):
    git(repo, "remote", "add", "origin", f"https://github.com/{course.REPOSITORY.upper()}.git")
    assert resolve(repo).repository == course.REPOSITORY


@needs_git
def test_build_writes_the_remotes_address_and_says_where_it_came_from(repo, capsys):
    git(repo, "remote", "add", "origin", "git@github.com:ada-lab/grad-accum.git")
    assert main(["build", "--root", str(repo)]) == 0
    out = capsys.readouterr().out
    assert "Repository: ada-lab/grad-accum (from the git remote origin, git@github.com:" in out
    cell = (repo / "exercises" / "demo.ipynb").read_text()
    assert "git+https://github.com/ada-lab/grad-accum@" in cell


@needs_git
def test_check_refuses_the_placeholder_when_the_github_remote_disagrees(repo, monkeypatch, capsys):
    monkeypatch.setattr(course, "PLACEHOLDER_REPOSITORY", course.REPOSITORY, raising=False)
    git(repo, "remote", "add", "origin", "https://github.com/ada-lab/grad-accum.git")
    assert main(["build", "--root", str(repo)]) == 0
    assert "Set REPOSITORY" in capsys.readouterr().err  # building only warns
    assert main(["build", "--check", "--root", str(repo)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("coursekit build: coursekit/course.py still holds the template's")
    assert 'Set REPOSITORY = "ada-lab/grad-accum" in coursekit/course.py' in err
    with pytest.raises(ValueError, match="placeholder"):
        build(repo, check=True)
    # CI's sync check compares with course.py's address, whatever the clone's origin
    build(repo, publication=from_course())
    assert main(["build", "--check", "--repository-from", "course", "--root", str(repo)]) == 0


@needs_git
def test_check_passes_where_course_py_is_not_the_placeholder_or_origin_is_not_github(
    repo, monkeypatch
):
    monkeypatch.setattr(course, "PLACEHOLDER_REPOSITORY", course.REPOSITORY, raising=False)
    git(repo, "remote", "add", "origin", "/srv/git/grad-accum.git")  # a CI clone
    build(repo)
    assert main(["build", "--check", "--root", str(repo)]) == 0
    git(repo, "remote", "set-url", "origin", "https://github.com/ada-lab/grad-accum.git")
    monkeypatch.setattr(course, "PLACEHOLDER_REPOSITORY", "template/course")
    build(repo)
    assert build(repo, check=True) == []

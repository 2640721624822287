"""Test-wide settings, including for nbval's notebook kernels (they inherit this environment)."""

import atexit
import os
import shutil
import tempfile

import matplotlib
import pytest

# In solutions/ every check(...) must pass: a verdict other than "passed" raises there.
os.environ["COURSEKIT_STRICT_CHECKS"] = "1"
# One thread per process, here and in every notebook kernel and worker the tests start: the
# course's models are tiny, and on 2 busy cores torch's thread pools only fight each other
# (cells ran 10-30x slower with the default under load). Set before torch is imported.
for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")
# No test downloads anything: module 7 builds its tiny model from a configuration, and the
# Hugging Face libraries must not even look for the hub (a student's "auto" falls back).
for _offline in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_offline] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests draw figures without a screen (notebook kernels keep their inline backend).
matplotlib.use("Agg")

# Notebook kernels the tests start (nbval, nbclient, JupyterLab's) would each print "Kernel is
# running over TCP without encryption": expected for a kernel on localhost in a test, so it
# is filtered out, through an IPython profile of the tests' own (nothing else is silenced).
_KERNEL_CONFIG = """
import logging


class _NoTransportWarning(logging.Filter):
    def filter(self, record):
        return "without encryption" not in record.getMessage()


logging.getLogger("IPKernelApp").addFilter(_NoTransportWarning())
"""
_IPYTHONDIR = tempfile.mkdtemp(prefix="coursekit-tests-ipython-")
os.makedirs(os.path.join(_IPYTHONDIR, "profile_default"))
with open(os.path.join(_IPYTHONDIR, "profile_default", "ipython_kernel_config.py"), "w") as _f:
    _f.write(_KERNEL_CONFIG)
os.environ["IPYTHONDIR"] = _IPYTHONDIR
atexit.register(shutil.rmtree, _IPYTHONDIR, True)

# No test reads or writes the instructor's own keys: ``~/.config/coursekit`` (the signing key
# `coursekit certificate` makes on first use, the HMAC key of old certificates) is where
# coursekit's only path derived from the home folder points (keys.py, through
# XDG_CONFIG_HOME), and $COURSEKIT_KEY names a key anywhere. Every process the tests start
# sees a configuration folder of this session's own instead, which links every other tool's
# folder of the real one (pip's package sources, chromium's) but not coursekit's. HOME itself
# is left alone: it holds the tools' caches and identity (git's, pyenv's), no course state.
_REAL_CONFIG = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
_CONFIG_HOME = tempfile.mkdtemp(prefix="coursekit-tests-config-")
if os.path.isdir(_REAL_CONFIG):
    for _tool in os.listdir(_REAL_CONFIG):
        if _tool != "coursekit":
            os.symlink(os.path.join(_REAL_CONFIG, _tool), os.path.join(_CONFIG_HOME, _tool))
os.environ["XDG_CONFIG_HOME"] = _CONFIG_HOME
os.environ.pop("COURSEKIT_KEY", None)
atexit.register(shutil.rmtree, _CONFIG_HOME, True)

# Golden notebooks are pipeline fixtures (their exercise stubs raise on purpose), not course
# notebooks for nbval to run.
collect_ignore = ["tests/corpora/golden"]

# Tests that take minutes: whole batches through the sandbox, notebooks run end to end, the
# browser, the frameworks, and mutation testing. `pytest -m "not slow"` is the developers'
# fast subset; the README's test command (scripts/test) runs everything.
SLOW_FILES = {
    "test_answer_routes.py",
    "test_browser.py",
    "test_certificate_page_browser.py",
    "test_frameworks.py",
    "test_gradescope.py",
    "test_gradescope_docker_like.py",
    "test_grading_batch.py",
    "test_grading_corpus.py",
    "test_grading_harness.py",
    "test_grading_load.py",
    "test_grading_modules.py",
    "test_grading_resume.py",
    "test_grading_unprivileged.py",
    "test_hub_workshop.py",
    "test_mutation.py",
    "test_notebooks.py",
    "test_read_shield_docker_like.py",
    "test_sandbox_parts.py",
    "test_site_browser.py",
    "test_warm_parent.py",
}


# Seconds each of the longest files took in one run on 2 busy cores with 2 test processes
# (``--junitxml``'s times summed per file, 2026-12-05), roughly: only their order matters.
# With test processes side by side (scripts/test: pytest-xdist, whole files to one process),
# the longest files start first, so no process is left alone with one at the end. Only the
# order of whole files changes; the tests of a file (a notebook's cells) keep theirs.
LONGEST_FILES = {
    "test_browser.py": 450,
    "test_mutation.py": 335,
    "test_notebook_parameters.py": 225,
    "test_grading_modules.py": 215,
    "test_grading_harness.py": 175,
    "test_grading_corpus.py": 105,
    "test_notebooks.py": 95,
    "test_sandbox_parts.py": 95,
    "05_capstone.ipynb": 70,
    "test_gradescope_docker_like.py": 55,
    "07_real_model.ipynb": 50,
    "04_distributed.ipynb": 50,
    "test_gradescope.py": 40,
    "test_hub_workshop.py": 35,
    "test_grading_batch.py": 35,
    "test_ending_a_users_processes.py": 30,
    "test_warm_parent.py": 30,
    "test_distributed.py": 25,
    "06_batch_size.ipynb": 20,
    "test_gradebook_and_exports.py": 20,
    "test_seccomp_allow_list.py": 15,
    "03_batch_dependence.ipynb": 15,
    "test_grading_resume.py": 15,
    "test_launch.py": 15,
    "test_read_shield_docker_like.py": 15,
    "test_site_browser.py": 15,
}


@pytest.fixture
def outside_the_course(tmp_path, monkeypatch):
    """The current folder, an empty one of the test's own: `coursekit certificate` and
    `verify` look for the course's published key and revocation list (``certificates/``)
    from the current folder up, so run inside this working tree they would read whatever
    the instructor published there (the guide says to commit it)."""
    folder = tmp_path / "outside-the-course"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_FILES or item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: -LONGEST_FILES.get(item.path.name, 0))  # stable: files whole


def pytest_collection_finish(session):
    """Each untouched exercise runs once, not twice: where tests/test_browser.py runs it in
    JupyterLab in this session (selected, and chromium present), that test asserts all that
    tests/test_notebooks.py's run of it does (no error, its scale, every check "[not
    attempted]"), so the nbclient run is skipped with that reason. Without the browser, or
    with the browser test deselected, the nbclient run is the one that runs."""

    browser = {
        item.callspec.params.get("name")
        for item in session.items
        if item.path.name == "test_browser.py"
        and hasattr(item, "callspec")
        and item.callspec.params.get("folder") == "exercises"
    }
    if not browser:
        return
    from tests.helpers.lab_browser import missing_browser_reason

    if missing_browser_reason() is not None:
        return
    reason = "run in JupyterLab by tests/test_browser.py in this session, which asserts the same"
    for item in session.items:
        if (
            item.path.name == "test_notebooks.py"
            and item.originalname
            == "test_the_untouched_exercise_runs_to_the_end_and_every_check_says_not_attempted"
            and item.callspec.params.get("name") in browser
        ):
            item.add_marker(pytest.mark.skip(reason=reason))


_TIMELINE = os.environ.get("COURSEKIT_TEST_TIMELINE")


if _TIMELINE:

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        """With COURSEKIT_TEST_TIMELINE=FILE, each test process appends a line per test
        (process, start, end, CPU seconds of this process and its children, test id), so
        benchmarks/suite_timeline.py can show where a whole run's wall time goes."""

        import time

        def cpu():
            t = os.times()
            return t.user + t.system + t.children_user + t.children_system

        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        start, cpu_start = time.time(), cpu()
        yield
        line = f"{worker}\t{start:.3f}\t{time.time():.3f}\t{cpu() - cpu_start:.3f}"
        with open(_TIMELINE, "a") as out:
            out.write(f"{line}\t{item.nodeid}\n")

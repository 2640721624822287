"""Demonstration cells: tagged in notebooks/, kept by build, skipped by grading only while
they are as released and nothing that runs needs them; build --check refuses a demo cell
that defines a name a graded cell uses."""

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from coursekit.authoring.build import plan_build
from coursekit.authoring.demo_cells import (
    DEMO_TAG,
    EVERYTHING,
    demo_problems,
    names_defined,
    names_used,
    released_demos,
    skippable,
    source_sha256,
)
from coursekit.authoring.markup import MarkupError, question_name
from coursekit.authoring.released_demos import RECORD
from coursekit.commands.cli import main
from coursekit.grading.grader import (
    Plan,
    cells_to_run,
    exercise_demos,
    recorded_demos,
    solution_cells,
)
from coursekit.grading.handin import read_hand_in
from coursekit.grading.sandbox.driver import Limits
from tests.helpers.git_history import PREVIOUS_RELEASE, at_commit

pytestmark = pytest.mark.authoring
REPO = Path(__file__).resolve().parents[1]
MODULES = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))


def test_names_a_cell_defines_are_its_top_level_bindings():
    source = (
        "import a.b as c, d.e\nfrom f import g\nx, (y, z) = 1, (2, 3)\n"
        "def h(q):\n    w = 1\nfor i in r:\n    pass\nwith o as p:\n    pass\n"
        "class K:\n    m = 1\n[j for j in r]\ndef s():\n    global G\n    G = 1"
    )
    assert names_defined(source) == {"c", "d", "g", "x", "y", "z", "h", "i", "p", "K", "s", "G"}


@pytest.mark.parametrize(
    ("source", "used"),
    [
        ("def f(model, x):\n    return model(x) + z", {"z"}),  # parameters are the function's
        ("class A:\n    q = w\n    def m(self):\n        return v", {"w", "v"}),
        ("x = x + 1", {"x"}),  # read before the cell binds it
        ("import sys\nprint(sys.path)", set()),  # bound by an earlier statement
        ("%timeit f(x)", {"f", "x"}),  # a magic's line is code
        ("!ls -l\ny = z", {"z"}),
        ("print(len(items))", {"items"}),  # builtins are nobody's
    ],
)
def test_names_a_cell_reads_from_the_notebook(source, used):
    assert names_used(source) == used


@pytest.mark.parametrize(
    "source",
    ["eval('model')", "globals()['model']", "get_ipython().user_ns['m']", "vars()", "exec(s)"],
)
def test_a_cell_that_reads_names_dynamically_may_need_anything(source):
    assert names_used(source) is EVERYTHING


DEMOS = {"d1": "data = [1, 2, 3]", "d2": "print(sum(data))", "d3": "plot(data)"}


def test_unchanged_demo_cells_are_skipped_and_edited_or_added_cells_run():
    cells = [("q", "def f(x):\n    return 2 * x"), *DEMOS.items()]
    assert skippable(cells, DEMOS) == {1, 2, 3}
    edited = [*cells[:2], ("d2", "print(max(data))"), cells[3]]
    assert skippable(edited, DEMOS) == {3}  # d2 runs, and so d1, whose data it reads
    added = [*cells, (None, "print(data)")]
    assert skippable(added, DEMOS) == {2, 3}
    same_source_new_id = [cells[0], ("other", DEMOS["d1"])]
    assert skippable(same_source_new_id, DEMOS) == set()


def test_a_demo_cell_whose_names_a_student_uses_runs():
    cells = [("q", "def f(x):\n    return x + len(data)"), *DEMOS.items()]
    assert skippable(cells, DEMOS) == {2, 3}
    dynamic = [("q", "def f(x):\n    return eval('data')"), *DEMOS.items()]
    assert skippable(dynamic, DEMOS) == set()


# d1 and d2 as an earlier release gave them: the sha256 of each source, by cell id
EARLIER = {"d1": [source_sha256("data = [1, 2]")], "d2": [source_sha256("print(len(data))")]}


def test_demo_cells_as_an_earlier_release_gave_them_are_skipped():
    cells = [("q", "def f(x):\n    return 2 * x"), ("d1", "data = [1, 2]"), ("d3", "plot(data)")]
    assert skippable(cells, DEMOS) == {2}  # d1 is not as the current release gives it
    assert skippable(cells, DEMOS, EARLIER) == {1, 2}
    mixed = [*cells, ("d2", "print(len(data))")]  # one cell as released then, one as now
    assert skippable(mixed, DEMOS, EARLIER) == {1, 2, 3}


def test_a_source_no_release_gave_that_cell_runs():
    in_no_release = [("q", "def f(x):\n    return 2 * x"), ("d1", "data = [9]")]
    assert skippable(in_no_release, DEMOS, EARLIER) == set()
    another_cells = [in_no_release[0], ("d3", "data = [1, 2]")]  # d1's earlier source, in d3
    assert skippable(another_cells, DEMOS, EARLIER) == set()


def test_an_earlier_demo_source_whose_names_a_running_cell_uses_runs():
    cells = [("q", "def f(x):\n    return x + len(data)"), ("d1", "data = [1, 2]")]
    assert skippable(cells, DEMOS, EARLIER) == set()
    changes_state = {"d1": [source_sha256("import os\nos.environ['X'] = '1'")]}
    assert skippable([("d1", "import os\nos.environ['X'] = '1'")], {}, changes_state) == set()


# Exercise 1's demo cell m01-19 as the release before papermill parameters (b0932e6) gave it
M01_19_AT_B0932E6 = 'print((64 + 3 * 256) * 4, "bytes per sample, by hand")'


def _hand_in_with(tmp_path, module: str, cell_id: str, source: str):
    notebook = json.loads((REPO / "solutions" / f"{module}.ipynb").read_text())
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    index = next(i for i, c in enumerate(code) if c.get("id") == cell_id)
    code[index]["source"] = source
    path = tmp_path / f"{module}.ipynb"
    path.write_text(json.dumps(notebook))
    return read_hand_in(path, module, "ada"), index


def test_a_demo_cell_as_the_previous_release_gave_it_is_skipped_and_an_edited_one_runs(tmp_path):
    module = "01_accumulation"
    assert exercise_demos(REPO, module)["m01-19"] != M01_19_AT_B0932E6  # edited since
    demos, earlier = exercise_demos(REPO, module), recorded_demos(REPO, module)
    plan = Plan(module, {}, {}, Limits(), demos=demos, earlier_demos=earlier)
    hand_in, index = _hand_in_with(tmp_path, module, "m01-19", M01_19_AT_B0932E6)
    assert cells_to_run(hand_in, plan)[index] is None
    current_only = Plan(module, {}, {}, Limits(), demos=demos)
    assert cells_to_run(hand_in, current_only)[index] == M01_19_AT_B0932E6
    edited = M01_19_AT_B0932E6.replace("by hand", "mine")  # in no release: it runs
    hand_in, index = _hand_in_with(tmp_path, module, "m01-19", edited)
    assert cells_to_run(hand_in, plan)[index] == edited


@pytest.mark.parametrize("module", MODULES)
def test_a_hand_in_from_the_previous_release_skips_what_that_release_skipped(module, tmp_path):
    text = at_commit(f"exercises/{module}.ipynb")
    if text is None:
        pytest.skip(f"needs the course's git history (commit {PREVIOUS_RELEASE})")
    path = tmp_path / f"{module}.ipynb"
    path.write_text(text)
    hand_in = read_hand_in(path, module, "ada")
    then = Plan(module, {}, {}, Limits(), demos=released_demos(json.loads(text)))
    now = Plan(
        module,
        {},
        {},
        Limits(),
        demos=exercise_demos(REPO, module),
        earlier_demos=recorded_demos(REPO, module),
    )
    assert None in cells_to_run(hand_in, then)
    assert cells_to_run(hand_in, now) == cells_to_run(hand_in, then)


def test_a_missing_or_corrupt_record_leaves_the_grader_the_current_release(tmp_path, capsys):
    shutil.copytree(REPO / "notebooks", tmp_path / "notebooks")
    assert recorded_demos(tmp_path, "01_accumulation")  # the committed record, copied
    (tmp_path / RECORD).unlink()
    assert recorded_demos(tmp_path, "01_accumulation") == {}
    assert capsys.readouterr().err == ""  # a course without a record: nothing to say
    for text in ("{not json", '{"01_accumulation": ["m01-19"]}', "\udcff"):
        (tmp_path / RECORD).write_text(text, errors="surrogateescape")
        assert recorded_demos(tmp_path, "01_accumulation") == {}
        err = capsys.readouterr().err
        assert err.startswith("coursekit grade: notebooks/released-demos.json is "), err
        assert "only demo cells as in the current release are skipped" in err
    plan = Plan(
        "01_accumulation", {}, {}, Limits(), demos=exercise_demos(tmp_path, "01_accumulation")
    )
    hand_in = read_hand_in(REPO / "solutions" / "01_accumulation.ipynb", "01_accumulation", "ada")
    assert cells_to_run(hand_in, plan) == solution_cells(REPO, "01_accumulation")


def test_a_hand_in_source_that_is_no_valid_utf8_is_read_not_raised():
    lone = "print('\ud800')"  # JSON may hold a lone surrogate
    assert skippable([("d1", lone)], {}, {"d1": [source_sha256(lone)]}) == {0}


@pytest.mark.parametrize("module", MODULES)
def test_build_keeps_the_demo_tags_and_the_graded_cells_need_no_demo(module):
    for folder in ("exercises", "solutions"):
        notebook = nbformat.read(REPO / folder / f"{module}.ipynb", as_version=4)
        code = [c for c in notebook.cells if c.cell_type == "code"]
        demos = [c for c in code if DEMO_TAG in c.metadata.get("tags", [])]
        assert demos, f"{folder}/{module} has no demo cells"
        assert not any(question_name(c) for c in demos)
        assert demo_problems(notebook) == []
    assert released_demos(nbformat.read(REPO / "exercises" / f"{module}.ipynb", 4))


def test_build_check_refuses_a_demo_cell_that_defines_what_a_question_uses(tmp_path, capsys):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("scale = 2"),
        nbformat.v4.new_code_cell(
            "# Question: double\ndef double(x):\n    ### BEGIN SOLUTION\n"
            "    return scale * x\n    ### END SOLUTION"
        ),
    ]
    notebook.cells[0].metadata["tags"] = [DEMO_TAG]
    nbformat.write(notebook, notebooks / "demo.ipynb")
    with pytest.raises(MarkupError, match=r"tagged demo but defines scale \(used by cell"):
        plan_build(tmp_path)
    assert main(["build", "--check", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "notebooks/demo.ipynb, cell 1:" in err and "Traceback" not in err
    notebook.cells[0].metadata["tags"] = []
    nbformat.write(notebook, notebooks / "demo.ipynb")
    plan_build(tmp_path)  # without the tag it builds


@pytest.mark.parametrize("module", MODULES)
def test_the_solution_as_a_hand_in_skips_exactly_its_demo_cells(module, tmp_path):
    hand_in = read_hand_in(REPO / "solutions" / f"{module}.ipynb", module, "ada")
    plan = Plan(module, {}, {}, Limits(), demos=exercise_demos(REPO, module))
    assert cells_to_run(hand_in, plan) == solution_cells(REPO, module)
    # the student edits one demo cell: it runs again, and so does what it needs
    notebook = json.loads((REPO / "solutions" / f"{module}.ipynb").read_text())
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    index = next(i for i, c in enumerate(code) if DEMO_TAG in c["metadata"].get("tags", []))
    code[index]["source"] = "".join(code[index]["source"]) + "\nprint('mine')"
    path = tmp_path / "edited.ipynb"
    path.write_text(json.dumps(notebook))
    edited = cells_to_run(read_hand_in(path, module, "ada"), plan)
    assert edited[index] is not None and edited[index].endswith("print('mine')")
    assert sum(c is None for c in edited) < sum(c is None for c in solution_cells(REPO, module))


def test_methods_named_like_builtins_are_not_dynamic_access():
    assert names_used("model = make().eval()\nprint(model)") == {"make"}
    assert names_used("import sys\nprint(sys._getframe().f_globals)") is EVERYTHING


# ------------------------------------------------------------------ the module __main__
# The notebook's namespace is the module __main__ (IPython puts it in sys.modules): a cell
# that imports from it reads the names it imports; one that reaches the module reads them all.


@pytest.mark.parametrize(
    ("source", "used"),
    [
        ("from __main__ import step_sizes\nprint(step_sizes)", {"step_sizes"}),
        ("from __main__ import a, b as c\nprint(c)", {"a", "b"}),  # b is read, c the cell's
        ("def f():\n    from __main__ import a\n    return a", {"a"}),  # when f runs
        ("if __name__ == '__main__':\n    main()", {"main"}),  # a test of the name, no read
        ("for m in model.modules():\n    print(m)", {"model", "m"}),  # torch's modules()
        ("import torch\nlayer = torch.nn.modules.Linear(2, 2)", set()),  # a package
        ("import importlib\nnp = importlib.import_module('numpy')", set()),
        ("print(dir(model))", {"model"}),  # dir of something: not the namespace
    ],
)
def test_a_cell_reads_what_it_imports_from_main(source, used):
    assert names_used(source) == used


@pytest.mark.parametrize(
    "source",
    [
        "from __main__ import *",
        "import __main__\nprint(__main__.step_sizes)",
        "import __main__ as m\nprint(m.step_sizes)",
        "import os, __main__",
        "from __main__.sub import x",
        "import importlib\nm = importlib.import_module('__main__')",
        "from importlib import import_module\nm = import_module('__main__')",
        "import importlib\nm = importlib.import_module(name)",  # a name the code does not show
        "import sys\nm = sys.modules['__main__']",
        "import sys\nm = sys.modules.get('__main__')",
        "import sys\nm = vars(sys.modules['__main__'])",
        "import sys as s\nm = s.modules['__main__']",
        "import sys\nmodules = sys.modules\nm = modules[key]",  # sys.modules, by any key
        "from sys import modules\nm = modules[key]",
        "import os\nm = os.sys.modules[key]",
        "from os import sys as s\nm = s.modules[key]",
        "m = __import__('__main__')",
        "import builtins\nm = builtins.__import__('__main__')",
        "import builtins\nn = builtins.globals()",
        "from builtins import globals as g\nn = g()",
        "n = __builtins__.vars()",
        "x = get_ipython().user_ns['step_sizes']",
        "shell = get_ipython()\nx = shell.user_ns['step_sizes']",
        "x = shell.user_global_ns['step_sizes']",
        "x = shell.user_module.step_sizes",
        "import IPython\nx = IPython.get_ipython().user_ns",
        "from IPython import get_ipython as ip\nx = ip()",
        "n = getattr(frame, 'f_globals')",
        "import operator\nn = operator.attrgetter('__dict__')(module)",
        "from sys import _getframe\nn = _getframe().f_globals",
        "import gc\nobjects = gc.get_objects()",
        "names = dir()",
        "%who",
        "%whos",
        "%store step_sizes",
        "%run -i script.py",
    ],
)
def test_a_cell_that_reaches_the_notebooks_namespace_may_need_anything(source):
    assert names_used(source) is EVERYTHING


MAIN_DEMOS = {"d1": "step_sizes = [1, 2]", "d2": "other = 3"}


def test_a_demo_cell_whose_names_a_cell_imports_from_main_runs():
    cells = [*MAIN_DEMOS.items(), ("q", "from __main__ import step_sizes\nprint(step_sizes)")]
    assert skippable(cells, MAIN_DEMOS) == {1}  # d1 runs: q reads step_sizes; d2 is skipped
    aliased = [*MAIN_DEMOS.items(), ("q", "from __main__ import step_sizes as s")]
    assert skippable(aliased, MAIN_DEMOS) == {1}
    for reaches in ("import __main__", "from __main__ import *", "import sys\nsys.modules"):
        every = [*MAIN_DEMOS.items(), ("q", reaches)]
        assert skippable(every, MAIN_DEMOS) == set(), reaches


def _hand_in_with_a_cell_added(tmp_path, module: str, source: str):
    notebook = json.loads((REPO / "solutions" / f"{module}.ipynb").read_text())
    notebook["cells"].append(nbformat.v4.new_code_cell(source, id="mine"))
    path = tmp_path / f"{module}.ipynb"
    path.write_text(json.dumps(notebook))
    return read_hand_in(path, module, "ada")


def test_grading_runs_the_demo_cell_a_student_imports_from_main(tmp_path):
    module = "01_accumulation"  # its demo cell m01-04b defines step_sizes
    demos = exercise_demos(REPO, module)
    assert "step_sizes" in names_defined(demos["m01-04b"])
    plan = Plan(module, {}, {}, Limits(), demos=demos)
    hand_in = read_hand_in(REPO / "solutions" / f"{module}.ipynb", module, "ada")
    ids = list(hand_in.cell_ids)
    assert cells_to_run(hand_in, plan)[ids.index("m01-04b")] is None  # skipped as released

    hand_in = _hand_in_with_a_cell_added(tmp_path, module, "from __main__ import step_sizes")
    ids = list(hand_in.cell_ids)
    run = cells_to_run(hand_in, plan)
    assert run[ids.index("m01-04b")] == demos["m01-04b"]  # it runs: the new cell needs it
    assert None in run  # the other demo cells are still skipped

    hand_in = _hand_in_with_a_cell_added(tmp_path, module, "import __main__\n__main__.step_sizes")
    assert None not in cells_to_run(hand_in, plan)  # every demo cell runs

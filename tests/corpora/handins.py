"""A corpus of module 1 hand-ins: correct, each known mistake, and hostile.

Most are minimal notebooks (the three answers plus one twist), so the corpus grades in a
minute; one is the full solution notebook, to keep the real thing in the batch.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.corpora import hostile, instrument_attacks
from tests.helpers.hand_ins import ASSIGNMENT, IMPORTS, REPO, answers, notebook

# Where a hand-in lies under the folder graded, when not at STUDENT.ipynb: the student is
# the top-level entry, whatever the file inside is called.
LAYOUT = {
    "zed": "zed/bob.ipynb",  # not bob's: zed's folder
    "cat": "cat/homework.ipynb",
    "dan": "dan/homework.ipynb",  # same file name as cat's: still two students
    "ada.": "ada..ipynb",  # exports apart from ada's
    # a file name that is not UTF-8: stored with each byte written as an escape
    "\\udcff\\udcfenon-utf8": b"\xff\xfenon-utf8.ipynb",
}
WRONG = {"accumulate_window": "loss_not_divided", "train_accumulated": "step_every_micro_batch"}


# name -> (cells, expected: "full" | "zero" | "partial" | "blank", text the feedback or error
# must hold); the name is the student the grader must find (see LAYOUT).
def corpus(forbidden: dict[str, Path]) -> dict[str, tuple]:
    gradebook, outside, reference = (forbidden[k] for k in ("gradebook", "outside", "reference"))
    socket_path = forbidden.get("socket", outside.with_suffix(".sock"))
    targets = {
        "socket": socket_path,
        "dgram": forbidden.get("dgram", outside.with_suffix(".dgram")),
    }
    return {
        **{
            name: ([IMPORTS, *payload, *answers()], "full", "")
            for name, payload in hostile.payloads(targets).items()
        },
        "forged_results": ([IMPORTS, hostile.FORGE, *answers(**WRONG)], "partial", "not divided"),
        # Right answers that are coursekit's own: full marks, and flagged for a human to read.
        "calls_the_reference": ([IMPORTS, hostile.CALLS_THE_REFERENCE, *answers()[1:]], "full", ""),
        # Red-team findings on the second sandbox: the channel pinned, the grader never
        # blocked, a callable object or a partial seen, model.forward seen, outputs capped.
        "man_in_the_middle": ([IMPORTS, *hostile.MAN_IN_THE_MIDDLE, *answers()[1:]], "full", ""),
        "flag_flood": ([IMPORTS, *hostile.FLAG_FLOOD, *answers()[1:]], "full", ""),
        "stall_command_pipe": ([IMPORTS, *hostile.STALL, *answers()], "full", ""),
        "torch_callable_patch": (
            [IMPORTS, hostile.CALLABLE_PATCH, *answers(train_accumulated="single_backward")],
            "flagged",
            "",
        ),
        "partial_of_the_answer": (
            [IMPORTS, answers()[0], hostile.PARTIAL_ANSWER, answers()[2]],
            "full",
            "",
        ),
        "forward_method": (
            [IMPORTS, "# Question: accumulate_window\n" + hostile.FORWARD_METHOD, *answers()[1:]],
            "partial",
            "more than a micro-batch",
        ),
        # Issue 40, item 4a: an instrument reached through the objects a function is given.
        **{
            f"instrument_{name}": ([IMPORTS, *cells], "partial", words)
            for name, _, cells, words in instrument_attacks.module1_hand_ins(answers)
        },
        "huge_outputs": (
            [
                IMPORTS,
                answers()[0],
                "# Question: train_accumulated\n" + hostile.HUGE_OUTPUTS,
                answers()[2],
            ],
            "partial",
            "too much of it",
        ),
        "imports_the_answer": (
            [IMPORTS, answers()[0], "from coursekit import train_accumulated", answers()[2]],
            "full",
            "",
        ),
        "surrogate_feedback": (
            [
                IMPORTS,
                *answers()[:2],
                "def plan_micro_batch(*args):\n    raise ValueError('\\udcff')",
            ],
            "partial",
            "ValueError",
        ),
        "bob": ([IMPORTS, *answers()], "full", ""),
        "zed": ([IMPORTS, *answers(**WRONG)], "partial", "not divided"),
        "cat": ([IMPORTS, *answers()], "full", ""),
        "dan": ([IMPORTS, *answers(**WRONG)], "partial", "not divided"),
        "ada": ([IMPORTS, *answers()], "full", ""),
        "ada.": ([IMPORTS, *answers(**WRONG)], "partial", "not divided"),
        list(LAYOUT)[-1]: ([IMPORTS, *answers()], "full", ""),
        "blank_exercise": (REPO / "exercises" / f"{ASSIGNMENT}.ipynb", "blank", "not attempted"),
        "correct_minimal": ([IMPORTS, *answers()], "full", ""),
        "duplicated_cells": ([IMPORTS, *answers(), *answers()], "full", ""),
        "syntax_error": (
            [
                IMPORTS,
                "# Question: accumulate_window\ndef accumulate_window(:\n    pass",
                *answers()[1:],
            ],
            "partial",
            "accumulate_window is not defined",
        ),
        "name_error": (
            [
                IMPORTS,
                *answers()[:2],
                "def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):\n"
                "    return undefined_helper(model)",
            ],
            "partial",
            "NameError",
        ),
        "renamed_function": (
            [IMPORTS, *answers()[:2], answers()[2].replace("def plan_micro_batch", "def plan")],
            "partial",
            "plan_micro_batch is not defined",
        ),
        "deleted_cells": ([IMPORTS, answers()[0]], "partial", "train_accumulated is not defined"),
        "infinite_loop": ([IMPORTS, "while True:\n    pass", *answers()], "full", ""),
        "endless_function": (
            [
                IMPORTS,
                *answers()[1:],
                "def accumulate_window(model, loss_fn, micro_batches):\n    while True:\n"
                "        pass",
            ],
            "partial",
            "took too long",
        ),
        "sleep_forever": ([IMPORTS, "import time\ntime.sleep(10**6)", *answers()], "full", ""),
        "sys_exit": ([IMPORTS, *answers(), "import sys\nsys.exit(1)"], "full", ""),
        "os_exit": ([IMPORTS, *answers()[:2], "import os\nos._exit(0)", answers()[2]], "full", ""),
        "hard_crash": (
            [IMPORTS, "import ctypes\nctypes.string_at(0)", *answers()],
            "full",
            "",
        ),
        "memory_bomb": (
            [IMPORTS, "hoard = [bytearray(2**28) for _ in range(1000)]", *answers()],
            "full",
            "",
        ),
        "many_processes": (
            [
                IMPORTS,
                "import subprocess\nkids = []\nfor _ in range(500):\n"
                "    kids.append(subprocess.Popen(['sleep', '300']))",
                *answers(),
            ],
            "full",
            "",
        ),
        "claims_another_name": (
            [IMPORTS, *answers(accumulate_window="loss_not_divided")],
            "partial",
            "not divided",
        ),
        "fifo_result": (
            [IMPORTS, *answers(), "import os\nos.mkfifo('../out/result.json')\nos._exit(0)"],
            "full",
            "",
        ),
        # Tries to sabotage the grader's bookkeeping files of old: results travel on a pipe,
        # so there is nothing to sabotage; the cell that ends the process is skipped.
        "endless_result": (
            [
                IMPORTS,
                *answers(),
                "import os\nos.symlink('/dev/zero', '../out/result.json')\n"
                "os.symlink('/dev/zero', '../out/progress.txt')\nos._exit(0)",
            ],
            "full",
            "",
        ),
        "udp_out": (
            [
                IMPORTS,
                "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
                ".sendto(b'answers', ('127.0.0.1', 9))",
                *answers(),
            ],
            "full",
            "",
        ),
        "unix_socket_out": (
            [
                IMPORTS,
                f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({str(socket_path)!r})"
                "\ns.sendall(b'answers')",
                *answers(),
            ],
            "full",
            "",
        ),
        "odd_metadata": (
            [IMPORTS, *answers()],
            "full",
            "",
        ),
        "warnings_on_stderr": (
            [
                IMPORTS,
                "import sys, warnings\nwarnings.warn('deprecated thing')\n"
                "print('noise', file=sys.stderr)",
                *[
                    c.replace("):\n", "):\n    __import__('warnings').warn('careful')\n", 1)
                    for c in answers()
                ],
            ],
            "full",
            "",
        ),
        "huge_output": (
            [IMPORTS, "for _ in range(200):\n    print('x' * 10**6)", *answers()],
            "full",
            "",
        ),
        "window_not_divided": (
            [IMPORTS, *answers(accumulate_window="loss_not_divided")],
            "partial",
            "not divided",
        ),
        "monkeypatch_torch": (
            [
                IMPORTS,
                "torch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a: True",
                *answers(accumulate_window="loss_not_divided"),
            ],
            "partial",
            "not divided",
        ),
        "monkeypatch_checks": (
            [
                IMPORTS,
                "import coursekit.checks as c\n"
                "for q in c.QUESTIONS.values():\n    q.judge = lambda *a, **k: None\n"
                "c.evaluate = lambda *a, **k: None",
                *answers(train_accumulated="step_every_micro_batch"),
            ],
            "partial",
            "every micro-batch",
        ),
        "write_gradebook_and_outside": (
            [
                IMPORTS,
                f"open({str(gradebook)!r}, 'wb').write(b'x')",
                f"open({str(outside)!r}, 'w').write('pwned')",
                *answers(),
            ],
            "full",
            "",
        ),
        "chmod_gradebook": (
            [IMPORTS, f"import os\nos.chmod({str(gradebook)!r}, 0o777)", *answers()],
            "full",
            "",
        ),
        "read_reference": (
            [IMPORTS, f"source = open({str(reference)!r}).read()", *answers()],
            "full",
            "",
        ),
        "corrupt": ("{not json", "zero", "not a Jupyter notebook"),
        "not_a_notebook": (
            b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
            "zero",
            "not a Jupyter notebook",
        ),
        "other_assignment": (REPO / "solutions" / "00_welcome.ipynb", "zero", "00_welcome"),
        "correct_full_solution": (REPO / "solutions" / f"{ASSIGNMENT}.ipynb", "full", ""),
        **{
            f"mistake_{mistake}": ([IMPORTS, *answers(train_accumulated=mistake)], "partial", text)
            for mistake, text in {
                "loss_not_divided": "not divided by the window",
                "step_every_micro_batch": "every micro-batch",
                "zero_grad_missing": "never cleared",
                "zero_grad_inside_loop": "zero_grad() runs before every",
                "mean_of_means": "mean of per-micro-batch means",
                "last_window_dropped": "never stepped",
                "last_window_scaled_by_n": "divided by accum_steps",
            }.items()
        },
    }


def write_corpus(folder: Path, forbidden: dict[str, Path]) -> dict[str, tuple[Path, str, str]]:
    """Write every hand-in as ``folder/NAME.ipynb`` (or as LAYOUT says); return
    name -> (path, expected, text)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, (content, expected, text) in corpus(forbidden).items():
        where = LAYOUT.get(name, f"{name}.ipynb")
        path = Path(os.fsdecode(os.path.join(os.fsencode(folder), os.fsencode(where))))
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copy(content, path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content)
        else:
            path.write_text(notebook(content))
        if name == "claims_another_name":  # a hand-in must not overwrite someone else's grade
            data = json.loads(path.read_text())
            data["metadata"]["coursekit"]["student"] = "correct_minimal"
            path.write_text(json.dumps(data))
        if name == "odd_metadata":
            data = json.loads(path.read_text())
            data["metadata"]["coursekit"] = "x"
            data["cells"].append({"source": "no cell type"})
            path.write_text(json.dumps(data))
        written[name] = (path, expected, text)
    return written

"""The quiz of each module (ungraded self-checks with instant feedback), read from data files.

The questions are course text, not code: each module's quiz is one JSON file in
``coursekit/quiz_data/``, named after the module (``01_accumulation.json``), so an instructor
edits or adds a question without touching Python, and a diff shows only the words changed.
The files are package data, read through :mod:`importlib.resources`, so an installed wheel
finds them as a source checkout does. Each file is checked when it is read: a missing or
misspelled field names the file and the question, instead of surfacing later as a wrong
widget.

A file holds::

    {
      "title": "Quiz: accumulating gradients",
      "questions": [
        {"prompt": "...", "options": ["...", "..."], "answer": 1, "explanation": "..."}
      ]
    }

``answer`` is the index of the right option, counted from 0 (the widget numbers options
from 1); ``explanation`` says why it is right and is shown after any attempt.
"""

from __future__ import annotations

import json
from importlib.resources import files

from coursekit.arguments import choice
from coursekit.quizzes.widget import Quiz, QuizQuestion

QUIZ_DATA = "quiz_data"  # the folder in the coursekit package
_QUESTION_FIELDS = {"prompt": str, "options": list, "answer": int, "explanation": str}
_JSON_NAMES = {str: "string", list: "array", int: "integer"}  # for the error messages


def parse_quiz(source: str, data: object) -> Quiz:
    """The :class:`Quiz` in ``data`` (one file's parsed JSON), or a ``ValueError`` that names
    ``source`` (the file), the question and the field at fault.

    Example:
        >>> parse_quiz("demo.json", {"title": "Demo", "questions": [
        ...     {"prompt": "2 + 2?", "options": ["3", "4"], "answer": 1, "explanation": "."}]}
        ... ).questions[0].options
        ('3', '4')
    """
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected an object with title and questions.")
    _require_fields(source, data, {"title": str, "questions": list})
    if not data["title"].strip() or not data["questions"]:
        raise ValueError(f"{source}: a quiz needs a title and at least one question.")
    questions = []
    for number, question in enumerate(data["questions"], start=1):
        where = f"{source}, question {number}"
        if not isinstance(question, dict):
            raise ValueError(f"{where}: expected an object, got {type(question).__name__}.")
        _require_fields(where, question, _QUESTION_FIELDS)
        options = question["options"]
        if len(options) < 2 or not all(isinstance(option, str) and option for option in options):
            raise ValueError(f"{where}: options must be two or more non-empty strings.")
        if not 0 <= question["answer"] < len(options):
            raise ValueError(
                f"{where}: answer {question['answer']} is not an option; it is the index of "
                f"the right option, from 0 to {len(options) - 1}."
            )
        for text in ("prompt", "explanation"):
            if not question[text].strip():
                raise ValueError(f"{where}: {text} is empty.")
        questions.append(
            QuizQuestion(
                question["prompt"], tuple(options), question["answer"], question["explanation"]
            )
        )
    return Quiz(data["title"], questions)


def _require_fields(where: str, data: dict, fields: dict[str, type]) -> None:
    """Exactly ``fields``, each of its type: a typo such as ``"explaination"`` is an error,
    not a question that silently lacks its explanation."""
    absent = [name for name in fields if name not in data]
    if absent:
        raise ValueError(f"{where}: missing {', '.join(absent)}.")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(
            f"{where}: unknown field {', '.join(unknown)}; expected {', '.join(fields)}."
        )
    for name, kind in fields.items():
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ValueError(f"{where}: {name} must be a JSON {_JSON_NAMES[kind]}, got {value!r}.")


def load_quizzes() -> dict[str, Quiz]:
    """Every module's quiz from the package's data files, by module name, in module order."""
    folder = files("coursekit").joinpath(QUIZ_DATA)
    quizzes = {}
    for path in sorted(folder.iterdir(), key=lambda path: path.name):
        if not path.name.endswith(".json"):
            continue
        source = f"{QUIZ_DATA}/{path.name}"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{source}: not valid JSON: {error}") from None
        quizzes[path.name.removesuffix(".json")] = parse_quiz(source, data)
    return quizzes


QUIZZES = load_quizzes()


def quiz(module: str) -> Quiz:
    """The quiz of a module, e.g. ``quiz("01_accumulation").show()``."""
    return QUIZZES[choice("module", module, QUIZZES)]

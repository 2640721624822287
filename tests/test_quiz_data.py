"""The quiz data files: every one loads, and a broken one names the file and the question.

The questions live in ``coursekit/quiz_data/*.json`` (see ``coursekit/quizzes/__init__.py``); these
tests read the files themselves, so a question added by hand is checked like the others.
"""

import copy
import json
from importlib.resources import files

import pytest

from coursekit import quizzes
from coursekit.course import MODULES
from coursekit.quizzes import QUIZ_DATA, QUIZZES, load_quizzes, parse_quiz

DATA_FILES = sorted(
    (
        path
        for path in files("coursekit").joinpath(QUIZ_DATA).iterdir()
        if path.name.endswith(".json")
    ),
    key=lambda path: path.name,
)
GOOD = {
    "title": "Demo",
    "questions": [{"prompt": "2 + 2?", "options": ["3", "4"], "answer": 1, "explanation": "."}],
}


def test_there_is_one_data_file_per_module():
    assert [path.name for path in DATA_FILES] == [f"{module.name}.json" for module in MODULES]


@pytest.mark.parametrize("path", DATA_FILES, ids=lambda path: path.name)
def test_every_quiz_file_loads_with_answers_among_options_and_explanations(path):
    quiz = parse_quiz(path.name, json.loads(path.read_text(encoding="utf-8")))
    assert quiz.title.strip() and quiz.questions
    for question in quiz.questions:
        assert 0 <= question.answer < len(question.options)
        assert question.explanation.strip()
    assert QUIZZES[path.name.removesuffix(".json")].questions == quiz.questions


def test_loading_again_gives_the_same_quizzes():
    again = load_quizzes()
    assert list(again) == list(QUIZZES)
    assert all(again[name].questions == QUIZZES[name].questions for name in QUIZZES)


def broken(change) -> dict:
    data = copy.deepcopy(GOOD)
    change(data["questions"][0])
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (broken(lambda q: q.pop("explanation")), r"demo\.json, question 1: missing explanation"),
        (
            broken(lambda q: q.update(explaination=q.pop("explanation"))),
            "question 1: missing explanation",
        ),
        (broken(lambda q: q.update(hint="?")), "question 1: unknown field hint"),
        (broken(lambda q: q.update(answer=2)), "question 1: answer 2 is not an option"),
        (broken(lambda q: q.update(answer="1")), "question 1: answer must be a JSON integer"),
        (broken(lambda q: q.update(answer=True)), "question 1: answer must be a JSON integer"),
        (broken(lambda q: q.update(options=["4"])), "question 1: options must be two or more"),
        (broken(lambda q: q.update(explanation=" ")), "question 1: explanation is empty"),
        ({"questions": []}, r"demo\.json: missing title"),
        ({"title": "Demo", "questions": []}, "at least one question"),
        ([], "expected an object"),
    ],
)
def test_a_broken_quiz_names_the_file_and_the_question(data, message):
    with pytest.raises(ValueError, match=message):
        parse_quiz("demo.json", data)


def test_a_file_that_is_not_json_is_named(monkeypatch, tmp_path):
    (tmp_path / QUIZ_DATA).mkdir()
    (tmp_path / QUIZ_DATA / "01_accumulation.json").write_text('{"title": "x",}')
    monkeypatch.setattr(quizzes, "files", lambda package: tmp_path)
    with pytest.raises(ValueError, match=r"quiz_data/01_accumulation\.json: not valid JSON"):
        load_quizzes()

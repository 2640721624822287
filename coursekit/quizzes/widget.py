"""Multiple-choice quizzes with instant feedback (ipywidgets, with a plain-text fallback).

Quizzes are for the student's own learning: they are never graded, so their answers can
live in the package. The feedback explains the right answer, not just "wrong".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QuizQuestion:
    prompt: str
    options: tuple[str, ...]
    answer: int  # index into options
    explanation: str  # why the right answer is right; shown after any attempt

    def __post_init__(self):
        if not 0 <= self.answer < len(self.options):
            raise ValueError(f"answer {self.answer} is not an option of {self.prompt!r}.")


def feedback(question: QuizQuestion, choice: int | None) -> tuple[bool, str]:
    """(correct?, the sentence to show) for a choice; None means nothing was picked."""
    if choice is None:
        return False, "Pick an answer first."
    if not 0 <= choice < len(question.options):
        return False, f"Choose one of options 1 to {len(question.options)}."
    if choice == question.answer:
        return True, f"Correct. {question.explanation}"
    return False, f"Not quite. {question.explanation}"


_OPTIONS_CLASS = "coursekit-quiz-options"
_WRAPPING_OPTIONS = (
    f"<style>.{_OPTIONS_CLASS} label {{display: flex !important; align-items: flex-start "
    "!important; height: auto !important; line-height: 1.35 !important; white-space: normal "
    f"!important; margin-bottom: 0.45em !important;}} .{_OPTIONS_CLASS} input {{float: none "
    "!important; flex: none !important; order: -1; height: auto !important; margin-top: 0.2em "
    "!important;}</style>"
)


class Quiz:
    """A list of questions; ``show()`` renders them as widgets in a notebook."""

    def __init__(self, title: str, questions: list[QuizQuestion]):
        self.title = title
        self.questions = list(questions)

    def answer(self, number: int, option: int) -> None:
        """Text fallback: ``quiz.answer(2, 1)`` answers question 2 with option 1 (1-based)."""
        correct, text = feedback(self.questions[number - 1], option - 1)
        print(("[right] " if correct else "[try again] ") + text)

    def widget(self):
        """One box per question: the options, a Check button, and the feedback line."""
        import ipywidgets as widgets

        # Radio labels have a fixed one-line height in JupyterLab and Colab, so an option
        # that wraps would overlap the next: let them grow with their text.
        boxes = [widgets.HTML(f"{_WRAPPING_OPTIONS}<h3>{self.title}</h3>")]
        for number, question in enumerate(self.questions, start=1):
            options = widgets.RadioButtons(
                options=[(text, index) for index, text in enumerate(question.options)],
                value=None,
                layout=widgets.Layout(width="auto"),
            )
            options.add_class(_OPTIONS_CLASS)
            button = widgets.Button(description="Check", button_style="primary")
            result = widgets.HTML()

            def on_click(_button, question=question, options=options, result=result):
                correct, text = feedback(question, options.value)
                colour = "green" if correct else "#b35900"
                result.value = f'<span style="color:{colour}">{text}</span>'

            button.on_click(on_click)
            boxes.append(
                widgets.VBox(
                    [widgets.HTML(f"<b>{number}. {question.prompt}</b>"), options, button, result]
                )
            )
        return widgets.VBox(boxes)

    def show(self) -> None:
        """Display the widget, or print the questions where ipywidgets is missing."""
        try:
            from IPython.display import display

            display(self.widget())
        except ImportError:
            print(self.as_text())

    def as_text(self) -> str:
        lines = [self.title, ""]
        for number, question in enumerate(self.questions, start=1):
            lines.append(f"{number}. {question.prompt}")
            lines += [f"   {i}) {text}" for i, text in enumerate(question.options, start=1)]
        lines.append("Answer with quiz.answer(question, option), e.g. quiz.answer(1, 2).")
        return "\n".join(lines)

// coursekit site: the quizzes and the search box, with no server and no library.
"use strict";

// Math: the notebooks' $...$ and $$...$$, typeset by the vendored KaTeX (assets/katex/).
if (window.renderMathInElement) {
  window.renderMathInElement(document.getElementById("content"), {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "$", right: "$", display: false },
    ],
    throwOnError: false,
  });
}

// Quiz: choosing an option says right or wrong and shows why, as the notebook's widget does.
document.querySelectorAll(".quiz-question").forEach(function (question) {
  var answer = Number(question.dataset.answer);
  var verdict = question.querySelector(".verdict");
  var explanation = question.querySelector(".explanation");
  question.querySelectorAll(".quiz-option").forEach(function (button) {
    button.addEventListener("click", function () {
      var right = Number(button.dataset.option) === answer;
      question.querySelectorAll(".quiz-option").forEach(function (other) {
        other.classList.remove("chosen", "right", "wrong");
      });
      button.classList.add("chosen", right ? "right" : "wrong");
      verdict.textContent = right ? "Correct." : "Not quite.";
      verdict.className = "verdict " + (right ? "right" : "wrong");
      verdict.hidden = false;
      explanation.hidden = false;
    });
  });
});

// Search: every word of the query, in a section's heading or text (search-index.js).
(function () {
  var box = document.getElementById("search-box");
  var list = document.getElementById("search-results");
  var index = window.COURSEKIT_SEARCH || [];
  if (!box || !list) return;
  function show() {
    var words = box.value.toLowerCase().split(/\s+/).filter(Boolean);
    list.textContent = "";
    if (!words.length) { list.hidden = true; return; }
    var found = index.filter(function (entry) {
      var text = (entry.title + " " + entry.heading + " " + entry.text).toLowerCase();
      return words.every(function (word) { return text.indexOf(word) >= 0; });
    }).slice(0, 20);
    found.forEach(function (entry) {
      var item = document.createElement("li");
      var link = document.createElement("a");
      link.href = entry.page + (entry.anchor ? "#" + entry.anchor : "");
      link.textContent = entry.title + (entry.heading ? ": " + entry.heading : "");
      item.appendChild(link);
      var at = entry.text.toLowerCase().indexOf(words[0]);
      if (at >= 0) {
        var snippet = document.createElement("span");
        snippet.textContent = " …" + entry.text.slice(Math.max(0, at - 40), at + 80) + "…";
        item.appendChild(snippet);
      }
      list.appendChild(item);
    });
    if (!found.length) {
      var none = document.createElement("li");
      none.textContent = "Nothing found.";
      list.appendChild(none);
    }
    list.hidden = false;
  }
  box.addEventListener("input", show);
  box.addEventListener("keydown", function (event) {
    if (event.key === "Escape") { box.value = ""; show(); }
  });
})();

"""``search_qa``: multi-hop questions about a generated world, answered by searching its corpus
(Search-R1, Jin et al. 2025, "Search-R1: Training LLMs to Reason and Leverage Search Engines with
Reinforcement Learning", arXiv:2503.09516; R1-Searcher, Song et al. 2025, arXiv:2503.05592;
ZeroSearch, Sun et al. 2025, arXiv:2505.04588: all train on QA with a retriever as the tool).

The world is fictional, so a model cannot answer from memory: people (each with a profession
and a city of birth), cities (each in a country, on a river) and countries (each with an
official language and a capital), one document per entity. A question of ``level`` h needs h
documents, read in a chain:

* level 1: "In which city was Ilsa Vorane born?" (the person's document);
* level 2: "In which country was Ilsa Vorane born?" (the person's, then the city's);
* level 3: "What is the official language of the country where Ilsa Vorane was born?" (the
  person's, the city's, the country's).

People are split into train and held-out ones, so held-out questions are about people no
training question names (the documents of all of them are in the corpus, as in open-domain
QA). The answer is scored by Search-R1's exact match: the text after the last ``Answer:`` (else
the whole reply), lower-cased, without punctuation, articles and extra spaces, equal to the
reference's.

:func:`generate` builds the world from a seed; ``data/search/`` ships its output
(``corpus.jsonl``: ``{id, title, text}``; ``questions.jsonl``: ``{id, question, answer, level,
split, support}``), written by ``python -m rlvr.data.search_qa data/search``. With ``path`` the
task reads such a folder instead (a user's own corpus and questions).
"""

from __future__ import annotations

import json
import random
import re
import string
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.data.base import Problem

PROMPT = (
    "Answer the question using the search tool over an encyclopedia of a fictional world; "
    "you cannot know the answer without searching. End with 'Answer: <name>'.\n"
    "Question: {question}"
)
QUESTIONS = {
    1: "In which city was {person} born?",
    2: "In which country was {person} born?",
    3: "What is the official language of the country where {person} was born?",
}
LEVELS = tuple(QUESTIONS)
PROFESSIONS = (
    "painter",
    "sculptor",
    "poet",
    "astronomer",
    "chemist",
    "composer",
    "cartographer",
    "architect",
    "weaver",
    "botanist",
)
_ONSETS = "b d f g k l m n p r s t v z br dr gr kr pr st tr th sh".split()
_VOWELS = "a e i o u ai ei ou".split()
_CODAS = ["", "", "n", "r", "l", "s", "th", "nd"]


@dataclass(frozen=True)
class World:
    """The generated world: ``documents`` [{id, title, text}] and ``questions`` [{id, question,
    answer, level, split, support}], in a fixed order."""

    documents: list[dict[str, Any]]
    questions: list[dict[str, Any]]


def _name(rng: random.Random, syllables: int, taken: set[str]) -> str:
    """A new capitalised made-up word of ``syllables`` syllables (never one in ``taken``)."""
    while True:
        word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables))
        word = (word + rng.choice(_CODAS)).capitalize()
        if word not in taken:
            taken.add(word)
            return word


def generate(
    seed: int = 0, countries: int = 8, cities: int = 24, people: int = 160, held_out: float = 0.25
) -> World:
    """The world of ``seed``: ``countries`` countries, ``cities`` cities and ``people`` people,
    a ``held_out`` fraction of the people held out, one question per person and level."""
    if not (countries >= 2 and cities >= countries and people >= 4 and 0 < held_out < 1):
        raise ValueError("search_qa: need countries >= 2, cities >= countries, people >= 4")
    rng = random.Random(f"search-qa-{seed}")
    taken: set[str] = set()
    nations = [_name(rng, 2, taken) for _ in range(countries)]
    languages = {c: _name(rng, 2, taken) + "ic" for c in nations}
    towns = [_name(rng, rng.choice((1, 2)), taken) for _ in range(cities)]
    country_of = {t: nations[i % countries] for i, t in enumerate(towns)}  # each has cities
    rivers = {t: _name(rng, 2, taken) for t in towns}
    capital = {c: next(t for t in towns if country_of[t] == c) for c in nations}
    folks = [f"{_name(rng, 2, taken)} {_name(rng, 2, taken)}" for _ in range(people)]
    born = {p: rng.choice(towns) for p in folks}
    job = {p: rng.choice(PROFESSIONS) for p in folks}
    documents = []
    for p in folks:
        documents.append(
            {
                "id": f"person:{p}",
                "title": p,
                "text": f"{p} is {'an' if job[p][0] in 'aeiou' else 'a'} {job[p]} who was born "
                f"in the city of {born[p]}.",
            }
        )
    for t in towns:
        documents.append(
            {
                "id": f"city:{t}",
                "title": t,
                "text": f"{t} is a city in {country_of[t]}, on the banks of the {rivers[t]} river.",
            }
        )
    for c in nations:
        documents.append(
            {
                "id": f"country:{c}",
                "title": c,
                "text": f"{c} is a country whose official language is {languages[c]}. "
                f"Its capital is {capital[c]}.",
            }
        )
    rng.shuffle(documents)
    cut = round(len(folks) * (1 - held_out))
    questions = []
    for i, p in enumerate(folks):
        city, country = born[p], country_of[born[p]]
        chain = [f"person:{p}", f"city:{city}", f"country:{country}"]
        for level, answer in ((1, city), (2, country), (3, languages[country])):
            questions.append(
                {
                    "id": f"search-L{level}-{i}",
                    "question": QUESTIONS[level].format(person=p),
                    "answer": answer,
                    "level": level,
                    "split": "train" if i < cut else "eval",
                    "support": chain[:level],
                }
            )
    return World(documents, questions)


def write(world: World, folder: Path) -> None:
    """``corpus.jsonl`` and ``questions.jsonl`` of ``world`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("corpus.jsonl", world.documents), ("questions.jsonl", world.questions)):
        text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
        (folder / name).write_text(text)


def read(folder: Path) -> World:
    """A world written by :func:`write` (or a user's folder of the same two files)."""
    rows = {}
    for name in ("corpus.jsonl", "questions.jsonl"):
        path = Path(folder) / name
        if not path.is_file():
            raise FileNotFoundError(f"search_qa: {path} does not exist")
        rows[name] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return World(rows["corpus.jsonl"], rows["questions.jsonl"])


def normalize_answer(text: str) -> str:
    """Search-R1's (and SQuAD's) answer normalisation: lower case, no punctuation, no articles
    (a, an, the), single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


_ANSWER = re.compile(r"answer\s*:\s*(.+)", re.IGNORECASE)


def exact_match(completion: str, answer: str) -> float:
    """1.0 if the text after the last ``Answer:`` (else the whole reply, its first line)
    normalises to the reference (:func:`normalize_answer`), else 0.0."""
    found = _ANSWER.findall(completion)
    given = found[-1] if found else completion
    given = given.strip().splitlines()[0] if given.strip() else ""
    return 1.0 if normalize_answer(given) == normalize_answer(answer) else 0.0


class SearchQATask:
    """Questions of one ``level`` about the world (see the module docstring).

    Args:
        level: hops, 1-3.
        seed: draws the training questions (the world itself is the one of ``world_seed``).
        n_eval: held-out questions (the first ones of the held-out people).
        path: a folder with ``corpus.jsonl`` and ``questions.jsonl`` (None: the generated world,
            which ``data/search/`` ships).
        world_seed: the generated world's seed.
        prompt_template: the user message, with ``{question}``.
    """

    name = "search_qa"

    def __init__(
        self,
        level: int = 2,
        seed: int = 0,
        n_eval: int = 40,
        path: str | None = None,
        world_seed: int = 0,
        prompt_template: str = PROMPT,
    ) -> None:
        world = read(Path(path)) if path is not None else generate(world_seed)
        rows = [q for q in world.questions if q["level"] == level]
        self.train = [q for q in rows if q["split"] == "train"]
        self.held_out = [q for q in rows if q["split"] == "eval"][:n_eval]
        if not self.train or not self.held_out:
            raise ValueError(f"search_qa: no train or held-out questions of level {level}")
        self.level, self.seed, self.template = level, seed, prompt_template

    def _problem(self, row: dict[str, Any]) -> Problem:
        return Problem(row["id"], self.template.format(question=row["question"]), row["answer"])

    def train_problem(self, index: int) -> Problem:
        rng = random.Random(f"{self.seed}-search-{self.level}-{index}")
        return self._problem(rng.choice(self.train))

    def eval_problems(self) -> list[Problem]:
        return [self._problem(row) for row in self.held_out]

    def score(self, completion: str, problem: Problem) -> float:
        return exact_match(completion, problem.answer)


if __name__ == "__main__":  # python -m rlvr.data.search_qa FOLDER: the shipped files
    write(generate(0), Path(sys.argv[1] if len(sys.argv) > 1 else "data/search"))

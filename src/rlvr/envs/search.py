"""``search``: answer a question with a ``search(query)`` tool over a local corpus, retrieved by
BM25 (Robertson and Zaragoza 2009; the ``bm25s`` library, Lù 2024, arXiv:2407.03618). An offline
stand-in for the search engine of Search-R1 (Jin et al. 2025, arXiv:2503.09516), R1-Searcher
(Song et al. 2025, arXiv:2503.05592) and ZeroSearch (Sun et al. 2025, arXiv:2505.04588), whose
training uses a local retriever (Search-R1's: BM25 or E5 over a Wikipedia dump) as the tool.

Pair it with ``task: {name: search_qa, level: 1..3}`` (:mod:`rlvr.data.search_qa`): multi-hop
questions about a generated world the model cannot know, answered from ``data/search/``'s
corpus (the same world, generated in memory, unless ``corpus`` names a ``corpus.jsonl``). Each
call returns the ``top_k`` documents as ``[i] Title: text`` lines; the final reply (a turn
without a call) is scored by the task's exact match.

``demonstration: true`` puts one worked exchange before the question: a two-hop question about a
training person answered with two searches (the tool's real results) and ``Answer: ...``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from rlvr.data.base import Task
from rlvr.data.search_qa import generate
from rlvr.envs.tool_env import ToolEnv
from rlvr.envs.tools import make_tool


class BM25Index:
    """BM25 over documents ``{id, title, text}`` (``bm25s``, English stop words, lower-cased
    tokens): :meth:`search` returns the ``k`` best as ``[i] Title: text`` lines."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        import bm25s

        if not documents:
            raise ValueError("search: the corpus has no documents")
        self.documents = documents
        self._bm25s = bm25s
        texts = [f"{d['title']}. {d['text']}" for d in documents]
        self.retriever = bm25s.BM25()
        self.retriever.index(
            bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False
        )

    def search(self, query: str, k: int) -> str:
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.vocab:  # nothing but stop words or punctuation
            return "No results: the query has no searchable words."
        k = min(k, len(self.documents))
        found, scores = self.retriever.retrieve(tokens, k=k, show_progress=False)
        lines = [
            f"[{rank}] {self.documents[int(i)]['title']}: {self.documents[int(i)]['text']}"
            for rank, (i, score) in enumerate(zip(found[0], scores[0], strict=True), start=1)
            if score > 0
        ]
        return "\n".join(lines) if lines else "No results."


@functools.lru_cache(maxsize=8)
def corpus_index(corpus: str | None, world_seed: int = 0) -> BM25Index:
    """The index of a ``corpus.jsonl`` file (None: the generated world of ``world_seed``), built
    once per process and shared by every episode's environment."""
    if corpus is None:
        return BM25Index(generate(world_seed).documents)
    path = Path(corpus)
    if not path.is_file():
        raise FileNotFoundError(f"env search: corpus {path} does not exist")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return BM25Index(rows)


def worked_example(world_seed: int = 0) -> list[dict[str, Any]]:
    """The two-hop exchange of ``demonstration: true``: the first training person of the
    generated world, searched by name and then by the city found (results filled in by the
    tool)."""
    world = generate(world_seed)
    row = next(q for q in world.questions if q["level"] == 2 and q["split"] == "train")
    person, city = (s.split(":", 1)[1] for s in row["support"])
    return [
        {"role": "user", "content": f"Question: {row['question']}"},
        {"role": "assistant", "tool_call": {"name": "search", "arguments": {"query": person}}},
        {"role": "tool"},
        {"role": "assistant", "tool_call": {"name": "search", "arguments": {"query": city}}},
        {"role": "tool"},
        {"role": "assistant", "content": f"Answer: {row['answer']}"},
    ]


class SearchEnv(ToolEnv):
    """A :class:`~rlvr.envs.tool_env.ToolEnv` with the one tool ``search`` (module docstring).

    Args:
        corpus: a ``corpus.jsonl`` of ``{id, title, text}`` (None: the generated world's).
        top_k: documents per search.
        world_seed: the generated world (with ``corpus`` None).
        demonstration: one worked exchange before the question.
    """

    def __init__(
        self,
        tool_format: str = "action",
        task: Task | None = None,
        system_prompt: str | None = None,
        tool_reward: float = 0.0,
        timeout_s: float = 5.0,
        corpus: str | None = None,
        top_k: int = 3,
        world_seed: int = 0,
        demonstration: bool = False,
        examples: list[list[dict[str, Any]]] | None = None,
    ) -> None:
        if top_k < 1:
            raise ValueError(f"env search: top_k must be >= 1, got {top_k}")
        index = corpus_index(corpus, world_seed)

        def search(query: str) -> str:
            """Search the encyclopedia; returns the best-matching documents.

            Args:
                query: words to look for, e.g. a person's or a place's name.
            """
            return index.search(query, top_k)

        tools = [make_tool(search, timeout_s=timeout_s)]
        if demonstration:
            examples = [worked_example(world_seed), *(examples or [])]
        super().__init__(tools, tool_format, task, system_prompt, tool_reward, examples)

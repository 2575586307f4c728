"""The offline search agent: the generated world and its shipped files, Search-R1's exact match
by hand, BM25 retrieval of every question's chain, a scripted searcher solving every held-out
question, token-exact episodes, and a run of the tiny model that trains and evaluates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_envs_episodes import assert_tokens_are_the_template, assert_trains_and_evaluates
from test_trainer import tiny_config

from rlvr.config import ConfigError, build_config
from rlvr.data.search_qa import SearchQATask, exact_match, generate, normalize_answer, read
from rlvr.envs.search import BM25Index, SearchEnv, corpus_index

SHIPPED = Path(__file__).parents[1] / "data" / "search"


def test_the_shipped_corpus_is_the_generators_output():
    """``data/search/`` is ``python -m rlvr.data.search_qa data/search``: regenerated, equal."""
    shipped, world = read(SHIPPED), generate(0)
    assert shipped.documents == world.documents and shipped.questions == world.questions
    assert len({d["id"] for d in world.documents}) == len(world.documents) == 192
    held = {q["support"][0] for q in world.questions if q["split"] == "eval"}
    trained = {q["support"][0] for q in world.questions if q["split"] == "train"}
    assert held and not held & trained  # held-out questions name people no training one does
    assert generate(1).documents != world.documents  # another seed, another world


@pytest.mark.parametrize(
    ("reply", "answer", "score"),
    [
        ("Answer: Lodein", "Lodein", 1.0),
        ("I searched.\nAnswer: the lodein.", "Lodein", 1.0),  # case, article, punctuation
        ("Answer: Lodein\nAnswer: Quelt", "Lodein", 0.0),  # the last answer counts
        ("Lodein", "Lodein", 1.0),  # no "Answer:": the reply's first line
        ("Answer: Lodein Vale", "Lodein", 0.0),  # exact, not contained
        ("", "Lodein", 0.0),
    ],
)
def test_exact_match_by_hand(reply, answer, score):
    assert exact_match(reply, answer) == score
    assert normalize_answer("  The  Quelt-river, a town! ") == "queltriver town"


def test_bm25_finds_each_link_of_every_held_out_chain():
    """Searching a chain's names finds its documents: the person's first, the city's and the
    country's among the top 3 (what a searcher that reads the results needs)."""
    world = generate(0)
    index = corpus_index(None, 0)
    for q in world.questions:
        if q["split"] != "eval" or q["level"] != 3:
            continue
        for rank_needed, doc_id in zip((1, 3, 3), q["support"], strict=True):
            name = doc_id.split(":", 1)[1]
            lines = index.search(name, 3).splitlines()
            titles = [line.split("] ", 1)[1].split(":", 1)[0] for line in lines]
            assert name in titles[:rank_needed], (name, titles)
    assert index.search("the of and", 3).startswith("No results")
    with pytest.raises(ValueError, match="no documents"):
        BM25Index([])


def _person(prompt: str) -> str:
    """The person a question names ("... was X born?", "... where X was born?")."""
    found = re.search(r"(?:was|where) (.+?) (?:was )?born\?", prompt)
    assert found is not None, prompt
    return found.group(1)


def _scripted_search(env: SearchEnv, problem) -> float:
    """Follow the chain as a perfect searcher: search the person, then each place the result
    names, and answer with the last place (the country's language at level 3)."""
    env.reset(problem, 0)
    person = _person(problem.prompt)
    text = env.step(f"Action: search[{person}]").messages[0]["content"]
    city = re.search(r"born in the city of (\w+)", text).group(1)
    answer = city
    if "country" in problem.prompt:
        text = env.step(f"Action: search[{city}]").messages[0]["content"]
        answer = re.search(rf"{city} is a city in (\w+)", text).group(1)
    if "language" in problem.prompt:
        text = env.step(f"Action: search[{answer}]").messages[0]["content"]
        answer = re.search(rf"{answer} is a country whose official language is (\w+)", text)[1]
    result = env.step(f"Answer: {answer}")
    assert result.done
    return result.reward


@pytest.mark.parametrize("level", [1, 2, 3])
def test_a_scripted_searcher_solves_every_held_out_question(level):
    task = SearchQATask(level=level, n_eval=40)
    env = SearchEnv(task=task)
    problems = task.eval_problems()
    assert len(problems) == 40
    assert all(_scripted_search(env, p) == 1.0 for p in problems)
    env.reset(problems[0], 0)
    assert env.step("Answer: Nowhere").reward == 0.0


def test_search_episodes_are_the_chat_template_token_for_token(smol_tok):
    task = SearchQATask(level=2)
    problem = task.eval_problems()[0]
    person = _person(problem.prompt)
    ep = assert_tokens_are_the_template(
        smol_tok,
        lambda: SearchEnv(task=task, demonstration=True),
        [f"Action: search[{person}]", "Action: search[Thobril]", f"Answer: {problem.answer}"],
        problem,
    )
    assert ep.num_turns == 3 and ep.turn_rewards[-1] == 1.0
    tool = [m["content"] for m in ep.messages if m["role"] == "tool"]
    assert tool[-2].startswith(f"[1] {person}: ")  # the worked example's, then the episode's


def search_config(run_dir: Path) -> dict:
    cfg = tiny_config(
        run_dir,
        steps=2,
        task={"name": "search_qa", "level": 2, "n_eval": 4},
        env={
            "name": "search",
            "params": {"demonstration": True},
            "max_turns": 3,
            "max_episode_tokens": 256,
        },
    )
    del cfg["reward"]
    return cfg


def test_a_search_agent_run_trains_and_evaluates(tmp_path):
    records = assert_trains_and_evaluates(search_config(tmp_path / "run"))
    assert all("search" in r["transcript"] for r in records)  # the worked example's calls


def test_search_configs_are_checked(tmp_path):
    cfg = search_config(tmp_path / "run")
    cfg["task"]["level"] = 4
    with pytest.raises(ConfigError, match="1 to 3 for search_qa"):
        build_config(cfg)
    cfg = search_config(tmp_path / "run")
    with pytest.raises(Exception, match="top_k must be >= 1"):
        SearchEnv(**cfg["env"]["params"], top_k=0)
    cfg = search_config(tmp_path / "run")
    cfg["task"]["dataset_kwargs"] = {"path": str(SHIPPED)}
    assert build_config(cfg).task.dataset_kwargs["path"] == str(SHIPPED)

"""Write arith_prefs.jsonl: preference pairs on the demo task's problems (arithmetic level 2),
for offline DPO / IPO (configs/dpo.yaml) and `rlvr rm train`.

Each row: ``prompt`` (the question), ``answer``, ``chosen`` (the worked solution,
rlvr.data.arithmetic.worked_solution) and ``rejected`` (the same steps ending in a wrong
answer: the result off by one, as small models often are). Run from the repository root:
``python configs/data/make_arith_prefs.py``.
"""

import json
import random
from pathlib import Path

from rlvr.data.arithmetic import ArithmeticTask

task = ArithmeticTask(level=2, seed=0)
rng = random.Random(0)
rows, seen = [], set()
for i in range(2000):
    problem = task.train_problem(i)
    question = problem.prompt.splitlines()[0]
    if question in seen:
        continue
    seen.add(question)
    chosen = problem.demonstrations[0].text
    wrong = str(int(problem.answer) + rng.choice((-1, 1)))
    rejected = chosen.rsplit("\n", 1)[0].rsplit("= ", 1)[0] + f"= {wrong}\nAnswer: {wrong}"
    rows.append({"prompt": question, "answer": problem.answer, "chosen": chosen, "rejected": rejected})
out = Path(__file__).with_name("arith_prefs.jsonl")
out.write_text("".join(json.dumps(r) + "\n" for r in rows))
print(f"{len(rows)} pairs -> {out}")

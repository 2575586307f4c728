"""Try SkyRL-gym's environments one by one through rlvr's adapter (made, reset, one action
stepped), offline; text2sql on a local sqlite database, search with a retrieval stub on
127.0.0.1: the table "What runs offline here" in docs/agents.md.

    python docs/ecosystems/try_skyrl.py
"""

import http.server
import json
import os
import sqlite3
import tempfile
import threading
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
from rlvr.data import Problem
from rlvr.envs.skyrl import SkyRLGymEnv

root = Path(tempfile.mkdtemp())
f = root / "spider/database/shop"
f.mkdir(parents=True)
db = sqlite3.connect(f / "shop.sqlite")
db.execute("CREATE TABLE items (name TEXT, price REAL)")
db.executemany("INSERT INTO items VALUES (?,?)", [("a", 1.0), ("b", 3.0)])
db.commit()
db.close()
tests = [{"input": "3\n4\n", "output": "7\n", "testtype": "stdin"}]
cases = {
    "gsm8k": ({}, {}, "72", "#### 72"),
    "gsm8k_multi_turn": ({"max_turns": 2}, {}, "72", "#### 72"),
    "aime": ({}, {}, "72", "so\nAnswer: 72"),
    "lcb": (
        {},
        {},
        json.dumps({"reward_spec": {"ground_truth": json.dumps(tests)}}),
        "```python\na=int(input());b=int(input());print(a+b)\n```",
    ),
    "searchcode": ({}, {}, "42", "<tool><python>print(6*7)</python></tool>"),
    "text2sql": (
        {},
        {"db_path": str(root)},
        json.dumps(
            {
                "db_id": "shop",
                "data": "spider",
                "reward_spec": {"ground_truth": "SELECT name FROM items WHERE price > 2"},
            }
        ),
        "<think>x</think><solution>SELECT name FROM items WHERE price > 2</solution>",
    ),
    "search": ({}, {}, "Paris", "<search>capital of France</search>"),
}
for env_id, (extras, env_config, answer, action) in cases.items():
    try:
        env = SkyRLGymEnv(env_id, extras=extras, env_config=env_config)
        env.reset(Problem("p", "question?", answer), seed=0)
        r = env.step(action)
        print(
            f"{env_id}: OK reward={r.reward} done={r.terminated} obs={[m['content'][:80] for m in r.messages]}"
        )
    except Exception as e:
        print(f"{env_id}: FAIL {type(e).__name__}: {str(e)[:200]}")

# search with a 10-line retrieval stub on 127.0.0.1


class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers["Content-Length"])
        self.rfile.read(n)
        body = json.dumps(
            {"result": [[{"document": {"contents": "Paris is the capital of France."}}]]}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


srv = http.server.HTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
cfg = {
    "search_url": f"http://127.0.0.1:{srv.server_port}/retrieve",
    "topk": 1,
    "timeout": 5,
    "log_requests": False,
}
env = SkyRLGymEnv("search", env_config=cfg, extras={"max_turns": 2})
env.reset(
    Problem(
        "p",
        "Capital of France?",
        json.dumps({"reward_spec": {"ground_truth": {"target": ["Paris"]}}, "max_turns": 2}),
    ),
    seed=0,
)
r = env.step("<search>capital of France</search>")
print("search turn1:", r.reward, r.terminated, r.messages[0]["content"][:90])
r = env.step("<answer>Paris</answer>")
print("search turn2:", r.reward, r.terminated)

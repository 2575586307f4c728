"""Try GEM's environments one by one through rlvr's adapter (made, reset, one action stepped),
with the hub off: the table "What runs offline here" in docs/agents.md.

    HF_HUB_OFFLINE=1 python docs/ecosystems/try_gem.py
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from rlvr.data import Problem  # noqa: E402
from rlvr.envs.gem import GemEnv, import_gem  # noqa: E402


def attempt(env_id: str, action: str) -> str:
    try:
        env = GemEnv(env_id)
        env.reset(Problem("p", "", ""), seed=0)
        step = env.step(action)
        return f"OK reward={step.reward} done={step.done}"
    except Exception as err:  # noqa: BLE001 - the survey reports every failure
        return f"FAIL {type(err).__name__}: {' '.join(str(err).split())[:160]}"


ids = sorted(import_gem().envs.registration.ENV_REGISTRY)
for env_id in ids:
    if env_id.startswith("rg:"):
        continue
    if env_id.startswith("game:") and not env_id.endswith("-easy"):
        continue
    print(env_id, attempt(env_id, "\\boxed{1}"), flush=True)
rg = [i for i in ids if i.startswith("rg:")]
failed = {i: result for i in rg if not (result := attempt(i, "\\boxed{0}")).startswith("OK")}
print(f"rg:* {len(rg) - len(failed)} of {len(rg)} OK; failed: {failed}")

# GEM's tool wrappers (env.params.wrappers), on a reasoning-gym task: one tool call stepped
calls = {"python": "<python>print(6 * 7)</python>", "search": "<search>capital of France</search>"}
for name in ("python_tool", "python_tool_no_int_reward", "python_tool_no_int_reward_last_line_error",
             "search_tool", "search_tool_no_int_reward"):  # fmt: skip
    try:
        env = GemEnv("rg:basic_arithmetic", wrappers=name)
        env.reset(Problem("p", "", ""), seed=0)
        step = env.step(calls[name.split("_")[0]])
        counts = f"tool_calls={step.info['tool_calls']} tool_errors={step.info['tool_errors']}"
        shown = " ".join(step.messages[0]["content"].split())[:100] if step.messages else ""
        print(f"wrappers={name} OK {counts}: {shown}", flush=True)
    except Exception as err:  # noqa: BLE001 - the survey reports every failure
        print(f"wrappers={name} FAIL {type(err).__name__}: {' '.join(str(err).split())[:160]}")

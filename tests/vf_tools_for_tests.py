"""A verifiers (v1) taskset whose tasks give the model an MCP tool: ``add`` on a toolset server
that verifiers starts for each episode (``python -m vf_tools_for_tests``, MCP over HTTP on
127.0.0.1), the reward for the boxed sum."""

import verifiers.v1 as vf


class CalcToolset(vf.Toolset[vf.ToolsetConfig]):
    @vf.tool
    async def add(self, a: int, b: int) -> str:
        """Add two non-negative integers."""
        if a < 0 or b < 0:
            raise ValueError("add takes non-negative integers")
        return str(a + b)


class ToolsData(vf.TaskData):
    answer: str = ""


class ToolsTask(vf.Task[ToolsData]):
    @classmethod
    def toolsets(cls, config):
        return [CalcToolset(vf.ToolsetConfig())]

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(vf.extract_boxed_answer(trace.last_reply or "") == self.data.answer)


class ToolsTaskset(vf.Taskset[ToolsTask, vf.TasksetConfig]):
    def load(self):
        prompt = "Use the add tool to compute {} + {}, then answer in \\boxed{{}}."
        pairs = [(a, b) for a in range(20, 23) for b in range(5, 7)]
        return [
            ToolsTask(ToolsData(prompt=prompt.format(a, b), answer=str(a + b)), self.config.task)
            for a, b in pairs
        ]


__all__ = ["ToolsTaskset"]

if __name__ == "__main__":
    CalcToolset.run()

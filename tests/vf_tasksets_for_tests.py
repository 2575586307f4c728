"""Two verifiers (v1) tasksets built from in-memory rows, as a user writes one (no download):
``vf_tasksets_for_tests`` (boxed arithmetic answers, one reward) is found by its module name;
``vf_rubric_for_tests`` re-exports :class:`RubricTaskset` (a correctness and a format reward,
weighted)."""

import verifiers.v1 as vf

ROWS = [(f"What is {a} + {b}?", str(a + b)) for a in range(1, 5) for b in range(1, 4)]


class SumData(vf.TaskData):
    answer: str = ""


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(vf.extract_boxed_answer(trace.last_reply or "") == self.data.answer)


class SumTaskset(vf.Taskset[SumTask, vf.TasksetConfig]):
    def load(self):
        prompt = "{} Put the final answer in \\boxed{{}}."
        return [
            SumTask(SumData(prompt=prompt.format(q), answer=a), self.config.task) for q, a in ROWS
        ]


class RubricTask(SumTask):
    @vf.reward(weight=0.25)
    async def short(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply or "") <= 40)


class RubricTaskset(vf.Taskset[RubricTask, vf.TasksetConfig]):
    def load(self):
        return [RubricTask(SumData(prompt=q, answer=a), self.config.task) for q, a in ROWS]


__all__ = ["SumTaskset"]

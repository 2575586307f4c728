"""Token-exact chats: the trainer's token sequence of an episode is the chat template's.

An episode's tokens are ``prompt + action_1 + observation_1 + action_2 + ...``. The actions are
the ids the policy sampled, kept exactly (never decoded and encoded again). An observation is the
text the chat template renders between the end of an action and the start of the next one:

    closing of the assistant turn (what the policy did not sample of it, e.g. the "\\n" after
    ``<|im_end|>``, or the whole ``<|im_end|>\\n`` when the action was cut short)
    + render(history + new messages, add_generation_prompt) - render(history)

tokenized alone. This is exact when the template is *prefix-preserving* (rendering a longer chat
only appends text), which :meth:`ChatRenderer.check` verifies once at start on a probe chat: a
template that rewrites earlier turns (one that drops past reasoning, say) is refused with an
error that names the first turn it rewrites.

Tools are shown through the template's ``tools`` argument when the template uses it; otherwise
(a template that ignores ``tools``, such as SmolLM2's) their description and the call syntax go
into the system prompt (:func:`rlvr.envs.parsers.tools_prompt`).
"""

from __future__ import annotations

import json
from typing import Any

from rlvr.envs.base import EnvError, Message
from rlvr.envs.parsers import format_call
from rlvr.envs.tools import ToolCall

_PROBE = "Probe-action-7f3a"


class TemplateError(EnvError):
    """A chat template that cannot render episodes token-exactly."""


class ChatRenderer:
    """Renders an episode's prompt and observations as token ids (see the module docstring).

    Args:
        tokenizer: a transformers tokenizer with a chat template.
        tools: the tools' JSON schemas (``Tool.schema()``), or None.
        tools_text: the system-prompt text describing the tools, used when the template does
            not render ``tools`` itself.
        stop_token_ids: the ids that end an action (EOS, ``<|im_end|>``).
    """

    def __init__(
        self,
        tokenizer: Any,
        tools: list[dict] | None = None,
        tools_text: str | None = None,
        stop_token_ids: tuple[int, ...] = (),
    ) -> None:
        self.tokenizer = tokenizer
        self.tools = tools or None
        self.tools_text = tools_text
        self.stop_token_ids = stop_token_ids
        self.native_tools = self.tools is not None and self._renders_tools()
        self.closing = self._closing()

    def render(self, messages: list[Message], generation_prompt: bool) -> str:
        """The chat template's text of ``messages``."""
        kwargs: dict[str, Any] = {"tools": self.tools} if self.native_tools else {}
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=generation_prompt, tokenize=False, **kwargs
        )

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def first_messages(self, messages: list[Message]) -> list[Message]:
        """The environment's first messages, with the tools described in the system prompt when
        the template does not show them."""
        if self.tools is None or self.native_tools or not self.tools_text:
            return list(messages)
        if messages and messages[0]["role"] == "system":
            head = messages[0]["content"] + "\n\n" + self.tools_text
            return [{"role": "system", "content": head}, *messages[1:]]
        return [{"role": "system", "content": self.tools_text}, *messages]

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """Token ids of the first messages, ending with the assistant's turn header."""
        return self.encode(self.render(messages, True))

    def observation_ids(
        self, history: list[Message], action_ids: list[int], new: list[Message]
    ) -> list[int]:
        """The tokens between an action and the next one: the rest of the assistant turn's
        closing, then ``new`` rendered as a suffix of ``history`` (which ends with the action's
        assistant message) with the next assistant header."""
        before = self.render(history, False)
        after = self.render([*history, *new], True)
        if not after.startswith(before):
            raise TemplateError(_not_a_prefix(len(history), before, after))
        return self.encode(self._rest_of_closing(action_ids) + after[len(before) :])

    def _rest_of_closing(self, action_ids: list[int]) -> str:
        """What the template writes after an assistant message's content and the policy did not
        sample: the closing without its stop token when the action ended with one."""
        if action_ids and action_ids[-1] in self.stop_token_ids:
            stop = self.tokenizer.decode([action_ids[-1]])
            if self.closing.startswith(stop):
                return self.closing[len(stop) :]
        return self.closing

    def _closing(self) -> str:
        """The text the template writes after an assistant message's content (probed)."""
        chat = [{"role": "user", "content": "Hi"}]
        head = self.render(chat, True)
        full = self.render([*chat, {"role": "assistant", "content": _PROBE}], False)
        if not full.startswith(head + _PROBE):
            raise TemplateError(
                "the chat template does not render an assistant message as the generation "
                "prompt followed by its content (needed to continue a chat token for token); "
                f"rendered {full[len(head) - 20 :]!r}"
            )
        return full[len(head) + len(_PROBE) :]

    def _renders_tools(self) -> bool:
        chat = [{"role": "user", "content": "Hi"}]
        plain = self.tokenizer.apply_chat_template(chat, tokenize=False)
        with_tools = self.tokenizer.apply_chat_template(chat, tokenize=False, tools=self.tools)
        return plain != with_tools

    def check(self, observation_role: str = "user") -> None:
        """Verify once that the template is prefix-preserving on a probe episode (first
        messages, action, observation, action, observation); raises :class:`TemplateError`
        naming the first turn it rewrites."""
        chat = self.first_messages([{"role": "user", "content": "Question?"}])
        turns = [
            {"role": "assistant", "content": "First action."},
            {"role": observation_role, "content": "First observation."},
            {"role": "assistant", "content": "Second action."},
            {"role": observation_role, "content": "Second observation."},
        ]
        for turn in turns:
            longer = [*chat, turn]
            before = self.render(chat, turn["role"] == "assistant")
            after = self.render(longer, turn["role"] != "assistant")
            if not after.startswith(before):
                raise TemplateError(_not_a_prefix(len(chat), before, after))
            chat = longer


def _not_a_prefix(turns: int, before: str, after: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b), 0)
    return (
        f"the chat template is not prefix-preserving: adding a message after {turns} messages "
        f"rewrites earlier text at character {at} ({before[at : at + 40]!r} became "
        f"{after[at : at + 40]!r}), so an episode's tokens cannot continue token for token. "
        "Use a model whose chat template only appends (model.chat_template), or a "
        "single-turn task"
    )


def encode_demonstration(
    tokenizer: Any,
    prompt: list[Message],
    turns: list[Message],
    stop_token_ids: tuple[int, ...],
) -> tuple[list[int], list[int], list[int]]:
    """A demonstration's tokens as an episode's: the prompt's ids (ending with the assistant
    header), then the completion's ids and the loss mask over them, 1 exactly on what the policy
    would sample: each assistant message's content and the template's closing up to and
    including its first stop token; 0 on the rest (the closing after the stop token, tool
    results, user turns and the next assistant header).

    Segments are the chat template's text between consecutive renders (prefix-preserving, as
    for episodes: :class:`ChatRenderer`), each tokenized alone, as the agent loop does: an
    assistant segment is tokenized as the policy would write it after the header.

    Args:
        tokenizer: a transformers tokenizer with a chat template.
        prompt: the problem's messages (system prompt included).
        turns: the demonstration's messages (first and last an assistant's).
        stop_token_ids: the ids that end an assistant turn (EOS, ``<|im_end|>``).
    Returns:
        prompt_ids, completion_ids, mask (as long as completion_ids).
    Raises:
        TemplateError: a template that rewrites earlier text when a message is added.
    """

    def render(messages: list[Message], generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(
            messages, add_generation_prompt=generation_prompt, tokenize=False
        )

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    if any(t.get("tool_calls") for t in turns) and not _renders_tool_calls(tokenizer):
        turns = [_calls_as_text(t) for t in turns]
    done = render(prompt, True)
    prompt_ids = encode(done)
    completion: list[int] = []
    mask: list[int] = []
    chat = list(prompt)
    for k, turn in enumerate(turns):
        assistant = turn["role"] == "assistant"
        if assistant and k > 0:  # the assistant header after a tool or user message
            head = render(chat, True)
            if not head.startswith(done):
                raise TemplateError(_not_a_prefix(len(chat), done, head))
            ids = encode(head[len(done) :])
            completion += ids
            mask += [0] * len(ids)
            done = head
        chat.append(turn)
        text = render(chat, False)
        if not text.startswith(done):
            raise TemplateError(_not_a_prefix(len(chat) - 1, done, text))
        ids = encode(text[len(done) :])
        if assistant:  # trained up to and including the first stop token
            stop = next((j for j, t in enumerate(ids) if t in stop_token_ids), len(ids) - 1)
            mask += [1] * (stop + 1) + [0] * (len(ids) - stop - 1)
        else:
            mask += [0] * len(ids)
        completion += ids
        done = text
    return prompt_ids, completion, mask


_PROBE_CALL = "probe_tool_7f3a"


def _renders_tool_calls(tokenizer: Any) -> bool:
    """Whether the chat template shows an assistant message's ``tool_calls`` (probed)."""
    call = {"type": "function", "function": {"name": _PROBE_CALL, "arguments": {}}}
    chat = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    try:
        return _PROBE_CALL in tokenizer.apply_chat_template(chat, tokenize=False)
    except Exception:  # a template that cannot render them at all (content None, say)
        return False


def _calls_as_text(turn: Message) -> Message:
    """An assistant message's OpenAI-style ``tool_calls`` written into its content in the
    Hermes format (``<tool_call>{"name", "arguments"}</tool_call>``, what rlvr's agent loop
    parses), for a template that does not render ``tool_calls``; other messages unchanged."""
    calls = turn.get("tool_calls")
    if turn.get("role") != "assistant" or not calls:
        return turn
    texts = []
    for call in calls:
        fn = call.get("function", call)
        arguments = fn.get("arguments") or {}
        if isinstance(arguments, str):  # OpenAI's: a JSON text
            arguments = json.loads(arguments) if arguments.strip() else {}
        texts.append(format_call(ToolCall(fn["name"], arguments), "hermes"))
    content = str(turn.get("content") or "").strip()
    rest = {k: v for k, v in turn.items() if k != "tool_calls"}
    return rest | {"content": "\n".join([content, *texts] if content else texts)}

"""The request fields the simulator honours, checked alike over HTTP and in process.

:func:`check_fields` reads a request body of one of the four APIs (prompt aside:
:mod:`.request_prompt`) and returns :class:`Limits`, or raises :class:`BadRequest` with the HTTP
status, the OpenAI error type and the field at fault, so a body the server refuses is refused by
the offline simulator too:

- ``n``: 1 or absent (one choice per request);
- ``stream``, ``ignore_eos``, ``return_token_ids``, ``stream_options.include_usage``: true, false
  or absent (a string such as ``"false"`` is refused, not taken as true);
- ``stream_options``: an object or absent;
- the output limit: ``max_tokens``, for chat ``max_completion_tokens`` when given, for the
  Responses API ``max_output_tokens``: an integer >= 1; required by the Messages API;
- ``min_tokens``: an integer >= 0, default 0; ignored by the Responses and Messages APIs, and so
  is ``ignore_eos`` by the Messages API, as vLLM 0.32 ignores them (it has no such fields there);
- ``sim_reasoning_tokens`` (the simulator's own, :mod:`.reasoning`): an integer >= 0 or absent;
- sampling, which the simulator does not model but a server checks (vLLM's ``SamplingParams``:
  a body it refuses must not pass here): ``temperature`` a number >= 0, ``top_p`` a number in
  (0, 1], ``top_k`` an integer >= -1 (-1 and 0 turn it off), each null or absent;
- chat ``tools``: a list of ``{"type": "function", "function": {"name": ...}}``; ``tool_choice``:
  ``none``, ``auto`` (the simulator calls no tool of its own accord), ``required`` (it calls the
  first tool: there must be one) or ``{"type": "function", "function": {"name": N}}`` (it calls
  N: one of the tools).

Once the prompt is tokenized, :func:`output_limits` fits them to the model's context
``max_model_len`` as vLLM (0.32) does: a prompt of more than ``max_model_len`` tokens, or of exactly
that many (no room for one output token), is refused with vLLM's message and ``param``
(``input_tokens``, ``max_tokens``); the output limit is ``min(max_tokens, max_model_len - prompt)``,
so a ``max_tokens`` past the context is cut to what is left, not refused; without ``max_tokens``
(absent or ``null``) it is the context left for chat and Responses, and 16 (:data:`COMPLETIONS_DEFAULT_MAX_TOKENS`)
for completions (vLLM's ``CompletionRequest`` default); then ``min_tokens`` must not exceed the
limit. ``tests/test_engine_vllm_sim.py`` holds these against vLLM's CPU build.

A prompt given as token ids passes :func:`check_token_ids`: a non-empty list of integers >= 0,
each below :func:`vocabulary_size`, the larger of the model's vocabulary and the tokenizer's
(vLLM's bound; no bound when the profile gives no ``vocab_size``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ..replayer.endpoint_types import SIM_REASONING_FIELD

if TYPE_CHECKING:
    from ..workloads.tokenizer import Tokenizer
    from .profile import Profile

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # vLLM's CompletionRequest.max_tokens default
FLAGS = ("stream", "ignore_eos", "return_token_ids")
DROPS_MIN_TOKENS = ("responses", "messages")  # vLLM has no min_tokens there (and no ignore_eos on messages)


ANTHROPIC_ERRORS = {400: "invalid_request_error", 404: "not_found_error", 500: "api_error"}


class BadRequest(Exception):
    """A request the server refuses: ``status``, OpenAI error ``type`` and the ``param`` at fault."""

    def __init__(
        self, message: str, param: str | None = None, status: int = 400, kind: str = "BadRequestError"
    ) -> None:
        super().__init__(message)
        self.param, self.status, self.kind = param, status, kind

    def response(self, api: str = "chat") -> Any:
        """The error as an aiohttp response: OpenAI's error object, or for the Messages API
        Anthropic's (``{"type": "error", "error": {"type", "message"}}``)."""
        from aiohttp import web

        if api == "messages":
            kind = ANTHROPIC_ERRORS.get(self.status, "api_error")
            return web.json_response(
                {"type": "error", "error": {"type": kind, "message": str(self)}}, status=self.status
            )
        error = {"message": str(self), "type": self.kind, "param": self.param, "code": self.status}
        return web.json_response({"error": error}, status=self.status)


class Limits(NamedTuple):
    max_tokens: int | None  # None: not given (the default depends on the prompt: output_limits)
    min_tokens: int
    limit_name: str  # the field that set max_tokens: max_tokens, max_completion_tokens, max_output_tokens
    reasoning: int | None = None  # sim_reasoning_tokens; None: not given
    tool: str | None = None  # the function the answer calls (tool_choice); None: no call
    ignore_eos: bool = False


def check_fields(body: Mapping[str, Any], api: str) -> Limits:
    """The output limits of ``body``, a request of ``api``, or :class:`BadRequest` naming the
    first bad field. (Absent fields cost one lookup each: the offline simulator checks every
    request.)"""
    get = body.get
    chat = api != "completions"
    if get("n") is not None and _integer(body, "n", 1, 1) != 1:
        raise BadRequest(f"n: only 1 is supported, got {get('n')!r}", "n")
    for name in FLAGS:
        if get(name) is not None:
            _check_flag(body, name)
    options = get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise BadRequest(f"stream_options: expected an object, got {options!r}", "stream_options")
        _check_flag(options, "include_usage", "stream_options.include_usage")
    limit_name = "max_output_tokens" if api == "responses" else "max_tokens"
    if api == "chat" and get("max_completion_tokens") is not None:
        limit_name = "max_completion_tokens"
    if get(limit_name) is not None:
        max_tokens: int | None = _integer(body, limit_name, 0, 1)
    elif api == "messages":
        raise BadRequest("max_tokens: Field required", "max_tokens")
    else:  # absent or null: 16 for completions, the context left for the others (vLLM)
        max_tokens = None if chat else COMPLETIONS_DEFAULT_MAX_TOKENS
    min_tokens = 0 if get("min_tokens") is None or api in DROPS_MIN_TOKENS else _integer(body, "min_tokens", 0, 0)
    if max_tokens is not None and min_tokens > max_tokens:
        raise BadRequest(f"min_tokens: {min_tokens} is more than {limit_name} {max_tokens}", "min_tokens")
    reasoning = None if get(SIM_REASONING_FIELD) is None else _integer(body, SIM_REASONING_FIELD, 0, 0)
    if get("temperature") is not None or get("top_p") is not None or get("top_k") is not None:
        _check_sampling(body)
    asks_tool = api == "chat" and (get("tool_choice") is not None or get("tools") is not None)
    tool = _called_tool(body) if asks_tool else None
    ignore_eos = bool(get("ignore_eos")) and api != "messages"
    return Limits(max_tokens, min_tokens, limit_name, reasoning, tool, ignore_eos)


def _called_tool(body: Mapping[str, Any]) -> str | None:
    """The function a chat request makes the answer call (module docstring), or None."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    names = []
    if tools is not None:
        if not isinstance(tools, list):
            raise BadRequest(f"tools: expected a list of tools, got {tools!r}", "tools")
        for index, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if not isinstance(name, str) or not name:
                raise BadRequest(
                    f"tools[{index}]: expected {{type: function, function: {{name: ...}}}}, got {tool!r}",
                    f"tools[{index}]",
                )
            names.append(name)
    if choice is None or choice in ("none", "auto"):
        return None
    if choice == "required":
        if not names:
            raise BadRequest("tool_choice: 'required' needs at least one tool in tools", "tool_choice")
        return names[0]
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise BadRequest(
            f"tool_choice: expected none, auto, required or {{type: function, function: {{name: ...}}}}, got {choice!r}",
            "tool_choice",
        )
    if name not in names:
        raise BadRequest(f"tool_choice: the function {name!r} is not one of the tools", "tool_choice")
    return name


def output_limits(limits: Limits, prompt_tokens: int, max_model_len: int) -> tuple[int, int]:
    """(max_tokens, min_tokens) of a request whose prompt has ``prompt_tokens`` tokens, fitted to
    the context ``max_model_len`` (module docstring), or :class:`BadRequest`: vLLM's, naming
    ``input_tokens`` (prompt too long) or ``max_tokens`` (no room left), or naming ``min_tokens``
    (more than the context leaves)."""
    if prompt_tokens > max_model_len:
        raise BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt contains at least "
            f"{prompt_tokens} input tokens, which exceeds this limit even without any output tokens. "
            f"Please reduce the length of the input prompt. (parameter=input_tokens, value={prompt_tokens})",
            "input_tokens",
        )
    if prompt_tokens == max_model_len:
        raise BadRequest("max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)", "max_tokens")
    left = max_model_len - prompt_tokens
    max_tokens = left if limits.max_tokens is None else min(limits.max_tokens, left)
    if limits.min_tokens > max_tokens:
        raise BadRequest(
            f"min_tokens: {limits.min_tokens} is more than the {max_tokens} output tokens the context leaves "
            f"({prompt_tokens} prompt tokens of max_model_len {max_model_len})",
            "min_tokens",
        )
    return max_tokens, limits.min_tokens


def vocabulary_size(profile: Profile, tokenizer: Tokenizer) -> int:
    """How many token ids a prompt may use: the larger of the profile's model's ``vocab_size`` and
    the tokenizer's, as vLLM bounds them; 0 (no bound) when the profile gives no ``vocab_size``."""
    model_vocab = profile.model.vocab_size if profile.model is not None else 0
    return max(model_vocab, tokenizer.vocab_size) if model_vocab else 0


def check_token_ids(prompt: Any, vocab_size: int) -> None:
    """:class:`BadRequest` naming ``prompt`` unless it is a non-empty list of integers >= 0 below
    ``vocab_size`` (0: no bound). Plain ints are checked by ``type``, ``min`` and ``max`` in C (a
    replay's prompts hold millions of ids); a list holding anything else is checked item by item."""
    if (
        not isinstance(prompt, list)
        or not prompt
        or not (
            set(map(type, prompt)) == {int}
            and min(prompt) >= 0
            or all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt)
        )
    ):
        raise BadRequest(
            "prompt: expected a non-empty string or a non-empty list of token ids (integers >= 0)", "prompt"
        )
    if vocab_size and max(prompt) >= vocab_size:
        raise BadRequest(f"prompt: Token id {max(prompt)} is out of vocabulary (ids 0 to {vocab_size - 1})", "prompt")


def _integer(body: Mapping[str, Any], name: str, default: int, minimum: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest(f"{name}: expected an integer >= {minimum}, got {value!r}", name)
    return value


def _check_sampling(body: Mapping[str, Any]) -> None:
    """``temperature``, ``top_p`` and ``top_k`` as vLLM's ``SamplingParams`` checks them (module
    docstring): a request with ``"temperature": "hot"`` or ``"top_p": 7`` was answered 200."""
    for name, low, high, low_open, what in (
        ("temperature", 0.0, None, False, "a number >= 0"),
        ("top_p", 0.0, 1.0, True, "a number in (0, 1]"),
    ):
        value = body.get(name)
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
        if not number or value < low or (low_open and value == low) or (high is not None and value > high):
            raise BadRequest(f"{name}: expected {what}, got {value!r}", name)
    _integer(body, "top_k", -1, -1)


def _check_flag(body: Mapping[str, Any], name: str, field: str | None = None) -> None:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise BadRequest(f"{field or name}: expected true or false, got {value!r}", field or name)

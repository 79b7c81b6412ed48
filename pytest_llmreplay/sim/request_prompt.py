"""The messages of a request's prompt, whichever chat-like API's shape it comes in, checked alike
over HTTP and in process: :func:`prompt_messages` gives ``(role, text, field)`` per message, in
order, or raises :class:`~.request_fields.BadRequest` naming the field at fault.

- chat: ``messages``, a non-empty list of ``{role, content}``, an assistant's ``tool_calls``
  shown by their arguments after its content (the tokens the model generated for them);
- responses: ``instructions`` (a string: the system message), then ``input``: a string (one user
  message) or a non-empty list of input items; an item with a ``role`` is a message, a
  ``function_call`` an assistant's call shown by its ``arguments``, a ``function_call_output`` a
  tool message of its ``output`` (vLLM turns both into the chat messages its template renders);
  a ``reasoning`` item shows nothing, as templates drop earlier turns' reasoning;
- messages: ``system`` (a string or a list of text blocks: the system message), then
  ``messages``, a non-empty list of ``{role, content}``.

A content is a string, or a list of parts whose texts count when their ``type`` is one of the
API's text types (chat ``text``; responses ``input_text``, ``output_text``; messages ``text``:
thinking blocks are dropped from the prompt, as templates drop earlier turns' reasoning), or
null; a Messages ``tool_use`` block counts its ``input`` as the JSON the model generated, a
``tool_result`` block its ``content`` (a string or text blocks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .request_fields import BadRequest

TEXT_PARTS = {"chat": ("text",), "responses": ("input_text", "output_text", "text"), "messages": ("text",)}
CALL_BLOCKS = {"messages": ("tool_use", "tool_result")}  # content blocks of a tool call and its result


def prompt_messages(body: Mapping[str, Any], api: str) -> list[tuple[str, str, str]]:
    """``(role, text, field)`` of each message of a chat, responses or messages request."""
    if api == "responses":
        system_field, key = "instructions", "input"
        system, items = body.get(system_field), body.get(key)
        if system is not None and not isinstance(system, str):
            raise BadRequest(f"instructions: expected a string, got {system!r}", "instructions")
        if isinstance(items, str) and items:
            items = [{"role": "user", "content": items}]
    else:
        system_field, key = "system", "messages"
        system, items = body.get(system_field) if api == "messages" else None, body.get(key)
    if not isinstance(items, list) or not items:
        shape = (
            "a string or a non-empty list of input items"
            if api == "responses"
            else "a non-empty list of {role, content} objects"
        )
        raise BadRequest(f"{key}: expected {shape}", key)
    messages = [("system", content_text(system, system_field, api), system_field)] if system else []
    for index, item in enumerate(items):
        field = f"{key}[{index}]"
        if api == "responses" and isinstance(item, dict) and "role" not in item:
            call = response_call(item, field)
            if call is not None:
                messages.append(call)
            continue
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            raise BadRequest(f"{field}: expected an object with a string 'role'", field)
        text = content_text(item.get("content"), f"{field}.content", api)
        if api == "chat":
            text += call_arguments(item.get("tool_calls"), field)
        messages.append((item["role"], text, f"{field}.content"))
    return messages


def response_call(item: Mapping[str, Any], field: str) -> tuple[str, str, str] | None:
    """A Responses input item that is no message, as the message the template shows of it: a
    ``function_call`` as the assistant's ``arguments``, a ``function_call_output`` as a tool
    message of its ``output``; None for the others (``reasoning``)."""
    kind = item.get("type")
    name = {"function_call": ("assistant", "arguments"), "function_call_output": ("tool", "output")}.get(str(kind))
    if name is None:
        return None
    role, key = name
    text = item.get(key, "")
    if isinstance(text, list):  # an output given as content parts
        text = content_text(text, f"{field}.{key}", "responses")
    if not isinstance(text, str):
        raise BadRequest(f"{field}.{key}: expected a string, got {text!r}", f"{field}.{key}")
    return role, text, f"{field}.{key}"


def content_text(content: Any, field: str, api: str = "chat") -> str:
    """A content's text: a string, or the texts of its parts of ``api``'s text types
    (:data:`TEXT_PARTS`) and call blocks (:data:`CALL_BLOCKS`), or "" for null."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        kinds, blocks = TEXT_PARTS[api], CALL_BLOCKS.get(api, ())
        texts = [
            _call_block_text(p, field) if p.get("type") in blocks else p.get("text")
            for p in content
            if p.get("type") in kinds or p.get("type") in blocks
        ]
        for text in texts:
            if not isinstance(text, str):
                raise BadRequest(f"{field}: a text part's text must be a string, got {text!r}", field)
        return "".join(texts)
    if content is None:
        return ""
    raise BadRequest(f"{field}: expected a string or a list of content parts", field)


def call_arguments(calls: Any, field: str) -> str:
    """The arguments of a chat assistant message's ``tool_calls``, joined: what the template shows
    of them (the tokens the model generated for them); ``field``: the message's."""
    if calls is None:
        return ""
    if not isinstance(calls, list) or not all(
        isinstance(c, dict) and isinstance(c.get("function"), dict) for c in calls
    ):
        raise BadRequest(
            f"{field}.tool_calls: expected a list of {{id, type, function: {{name, arguments}}}}", f"{field}.tool_calls"
        )
    arguments = [c["function"].get("arguments") for c in calls]
    return "".join(a for a in arguments if isinstance(a, str))


def _call_block_text(block: Mapping[str, Any], field: str) -> str:
    """What the template shows of a Messages ``tool_use`` block (its ``input`` as JSON: the
    arguments the model generated) or ``tool_result`` block (its ``content``)."""
    if block.get("type") == "tool_use":
        return json.dumps(block.get("input", {}))
    return content_text(block.get("content"), f"{field}.content", "messages")

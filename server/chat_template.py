"""Chat messages -> prompt text, with the model's jinja2 chat template.

  OpenAI `messages` --validate_messages--> [{"role", "content": str}]
      --ChatTemplate.render (sandboxed jinja2)--> prompt text --encode--> token ids

Template source, first found: the `--chat-template` file, the tokenizer's `chat_template`
(tokenizer_config.json), else DEFAULT_CHAT_TEMPLATE, a plain documented layout:

    <bos>system: You are terse.
    user: Hi
    assistant:

(one "role: content" line per message, then "assistant:" to prompt the reply). When the
rendered text already starts with the tokenizer's BOS token, it is encoded without adding
special tokens again, so the prompt never carries two BOS tokens.
"""

from __future__ import annotations

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from server.validation import RequestError

DEFAULT_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_MESSAGES = 1024


def _raise(message):
    raise RequestError("messages", f"messages: the chat template rejected them: {message}")


class ChatTemplate:
    def __init__(self, tokenizer, template: str | None = None):
        self.tokenizer = tokenizer
        self.source = template or getattr(tokenizer, "chat_template", None) or DEFAULT_CHAT_TEMPLATE
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        self._template = env.from_string(self.source)  # a broken template fails at startup, not per request
        self.bos_token = getattr(tokenizer, "bos_token", None) or ""
        self.eos_token = getattr(tokenizer, "eos_token", None) or ""

    def render(self, messages: list[dict]) -> str:
        try:
            return self._template.render(messages=messages, add_generation_prompt=True,
                                         bos_token=self.bos_token, eos_token=self.eos_token)
        except RequestError:
            raise
        except (TemplateError, ValueError, TypeError) as e:
            raise RequestError("messages", f"messages: the chat template failed on them: {e}") from None

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text, without a second BOS when the template wrote one."""
        if self.tokenizer is None:
            raise RequestError("messages", "messages: this model has no tokenizer (no tokenizer.json), so chat "
                                           "cannot be encoded; send token ids to /v1/completions")
        has_bos = bool(self.bos_token) and text.startswith(self.bos_token)
        return self.tokenizer.encode(text, add_special_tokens=not has_bos)


def validate_messages(messages) -> list[dict]:
    """OpenAI chat messages as [{"role", "content": str}, ...]; RequestError naming the bad field."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages", "messages must be a non-empty list of {role, content} objects")
    if len(messages) > MAX_MESSAGES:
        raise RequestError("messages", f"messages has {len(messages)} entries; at most {MAX_MESSAGES} are accepted")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RequestError(where, f"{where} must be an object with role and content")
        role = m.get("role")
        if role not in ROLES:
            raise RequestError(f"{where}.role", f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}")
        unknown = set(m) - {"role", "content", "name"}
        if unknown:
            raise RequestError(f"{where}.{sorted(unknown)[0]}",
                               f"{where}: unsupported field(s) {sorted(unknown)} (tools and images are not supported)")
        content = _content_text(m.get("content"), role, where)
        msg = {"role": role, "content": content}
        if m.get("name") is not None:
            if not isinstance(m["name"], str):
                raise RequestError(f"{where}.name", f"{where}.name must be a string")
            msg["name"] = m["name"]
        out.append(msg)
    return out


def _content_text(content, role: str, where: str) -> str:
    if isinstance(content, str):
        return content
    if content is None and role == "assistant":
        return ""
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(f"{where}.content[{j}]",
                                   f"{where}.content[{j}] must be {{\"type\": \"text\", \"text\": str}} (only text is supported)")
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError(f"{where}.content", f"{where}.content must be a string or a list of text parts")

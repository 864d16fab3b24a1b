"""Turning a problem statement into the model's input text.

The tokenizer's chat template when it has one (a system message, then the problem as the
user turn, then the assistant's generation prompt), a plain template otherwise. Which one,
the system prompt and the answer-format instruction are settings of the task
(``task.prompt.*``), so a ``mix`` can prompt math and code differently.
"""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.errors import check

TEMPLATES = ("auto", "chat", "plain")


@dataclass
class PromptConfig:
    template: str = "auto"
    """auto: the tokenizer's chat template if it has one, else ``plain``; chat: require it; plain."""
    system: str = ""
    """System prompt ("" = none). The plain template inserts it verbatim, so end it with a separator."""
    instruction: str = ""
    """The answer-format instruction appended to every problem (e.g. to answer in \\boxed{})."""
    plain: str = "{system}{problem}"
    """The plain template; {system} and {problem} (the problem plus its instruction) are filled in."""

    def __post_init__(self) -> None:
        check(self.template in TEMPLATES, "task.prompt.template", f"must be one of {TEMPLATES}, got {self.template!r}")
        check("{problem}" in self.plain, "task.prompt.plain", f"must contain {{problem}}, got {self.plain!r}")
        try:
            self.plain.format(system="", problem="")
        except (KeyError, IndexError, ValueError) as e:
            check(False, "task.prompt.plain", f"only {{system}} and {{problem}} may be used ({e!r}); write braces as {{{{ }}}}")


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render(cfg: PromptConfig, problem: str, tokenizer=None) -> str:
    """The input text for one problem statement.

    >>> render(PromptConfig(instruction=" Answer in \\\\boxed{}."), "1+1?")
    '1+1? Answer in \\\\boxed{}.'
    """
    text = problem + cfg.instruction
    use_chat = cfg.template == "chat" or (cfg.template == "auto" and has_chat_template(tokenizer))
    if not use_chat:
        return cfg.plain.format(system=cfg.system, problem=text)
    check(has_chat_template(tokenizer), "task.prompt.template",
          "chat was requested but the model's tokenizer has no chat template; use auto or plain")
    user = [{"role": "user", "content": text}]
    messages = ([{"role": "system", "content": cfg.system}] if cfg.system else []) + user
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception:  # some templates refuse a system turn: fold it into the user turn
        if not cfg.system:
            raise
        merged = [{"role": "user", "content": f"{cfg.system}\n\n{text}"}]
        return tokenizer.apply_chat_template(merged, tokenize=False, add_generation_prompt=True)

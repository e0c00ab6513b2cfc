"""Live rendering of turn events with ``rich`` (plain text when there is no TTY)."""

from __future__ import annotations

from typing import Any

import msgspec
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from .agent_events import (
    AgentEvent,
    AgentLeft,
    AgentReplaced,
    AgentResumed,
    AgentResumeFailed,
)
from .assembly import (
    AnswerDone,
    AnswerStarted,
    ErrorReceived,
    Event,
    SentenceReceived,
    StepReceived,
    ToolRequested,
    ToolResulted,
    Turn,
)

__all__ = ["TurnRenderer", "agent_status", "step_label"]

_MAX_TOOL_TEXT = 300


def step_label(index: int, total: int | None) -> str:
    """``"step 2 of 5"`` when the plan is known, else ``"step 2"``."""
    return f"step {index} of {total}" if total else f"step {index}"


def _short(value: Any) -> str:
    text = msgspec.json.encode(value).decode() if value is not None else "null"
    return text if len(text) <= _MAX_TOOL_TEXT else text[: _MAX_TOOL_TEXT - 1] + "…"


def agent_status(event: AgentEvent) -> str:
    """The status line (rich markup) telling the user what happened to the agent."""
    if isinstance(event, AgentLeft):
        return (
            f"[yellow]the agent left ({escape(event.identity)}); waiting up to "
            f"{event.wait:g}s for another agent…[/]"
        )
    if isinstance(event, AgentReplaced):
        return f"[dim]agent {escape(event.identity)} took over; resuming…[/]"
    if isinstance(event, AgentResumed):
        who = escape(event.identity)
        what = "rejoined" if event.previous == event.identity else "was replaced"
        if event.replayed:
            return (
                f"[yellow]the agent {what} ({who}); resumed after server message "
                f"{event.last_sequence_seen}[/]"
            )
        return (
            f"[yellow]the agent {what} ({who}); resumed without a replay of what was "
            f"missed ({escape(event.reason or 'no replay')})[/]"
        )
    if isinstance(event, AgentResumeFailed):
        return (
            f"[red]the new agent {escape(event.identity)} did not resume: {escape(event.reason)}[/]"
        )
    return (
        f"[red]the agent {escape(event.identity)} left and no agent took over within "
        f"{event.waited:g}s[/]"
    )


class TurnRenderer:
    """Prints each event as it arrives: dimmed steps, tool calls, then the answer."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._answer_open: set[str] = set()

    def question(self, text: str) -> None:
        """Echo the user's question."""
        self.console.print(Text.assemble(("you > ", "bold green"), text))

    def note(self, markup: str) -> None:
        """A status line (rich markup)."""
        self.console.print(markup)

    def __call__(self, event: Event) -> None:
        """Render one event."""
        c = self.console
        if isinstance(event, StepReceived):
            if not event.shown:
                return
            step = event.step
            total = step.total_steps or event.turn.total_steps
            label = step_label(step.step_index, total)
            text = step.content or ("[encrypted]" if step.encrypted_value else "")
            c.print(Text.assemble(("  ▸ ", "dim"), (f"{label}: ", "dim bold"), (text, "dim")))
        elif isinstance(event, ToolRequested):
            req = event.request
            c.print(
                Text.assemble(
                    ("  ⚙ tool ", "cyan"),
                    (req.tool_name, "bold cyan"),
                    (f" {_short(req.parameters)} ", "cyan"),
                    (f"[{req.execution}]", "dim cyan"),
                )
            )
        elif isinstance(event, ToolResulted):
            res = event.result
            if res.success:
                c.print(Text.assemble(("  ⚙ result ", "cyan"), (_short(res.result), "cyan")))
            else:
                reason = res.error_message or res.error_code or "failed"
                c.print(Text.assemble(("  ⚙ failed ", "red"), (reason, "red")))
        elif isinstance(event, AnswerStarted):
            self._open_answer(event.turn)
        elif isinstance(event, SentenceReceived):
            self._open_answer(event.turn)
            c.print(escape(event.sentence.text.strip()), end=" ", soft_wrap=True)
        elif isinstance(event, ErrorReceived):
            err = event.error
            self._close_answer(event.turn)
            c.print(Text(f"error {err.code}: {err.message}", style="bold red"))
        elif isinstance(event, AnswerDone):
            self._done(event.turn)

    def _open_answer(self, turn: Turn) -> None:
        if turn.user_message_id not in self._answer_open:
            self._answer_open.add(turn.user_message_id)
            label = "alicia > " if turn.own else "alicia (to another participant) > "
            self.console.print(Text(label, style="bold magenta"), end="")

    def _close_answer(self, turn: Turn | None) -> None:
        if turn is not None and turn.user_message_id in self._answer_open:
            self._answer_open.discard(turn.user_message_id)
            self.console.print()

    def _done(self, turn: Turn) -> None:
        if turn.message is not None and turn.error is None:
            self._open_answer(turn)
            self.console.print(escape(turn.message.content), end="", soft_wrap=True)
        self._close_answer(turn)
        if turn.hidden_steps:
            n = turn.hidden_steps
            self.console.print(
                Text(f"  ({n} reasoning step{'s' if n != 1 else ''} hidden)", style="dim")
            )

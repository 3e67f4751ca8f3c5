"""Block Kit for the Home tab and the allowance list: pure functions from the run service's
view models (`bot.runs.views`) to Slack dicts.

The Home tab's Approve, Reject and Edit buttons are the card's own action ids carrying the same
ledger id, so a click there is handled exactly like one on the card (container type `view`).

A tab is published through the outbox, one key per person (`home:<user>`). A tab its person just
opened is drawn at once and published at once (`home_entry`). A tab owed after a change its person
sees is an intent (`home_intent`, method `HOME_TAB`): it settles (`HOME_SETTLE`: due once the
burst of changes quieted), and the sender draws it when it sends it (`home_renderer`), from the
state then. So a burst of decisions (twenty within two seconds, each changing twenty people's
tabs) publishes each person's tab once, with the latest view, and draws each tab once, not once
per decision.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
)
from slack_sdk.models.views import View

from ..runs.views import AllowanceInfo, CardCall, HomeView
from ..store import OutboxEntry
from .cards import card_body, overflow, section
from .freezes import freeze_lines, unreviewed_lines
from .ids import (
    ACTION_APPROVE,
    ACTION_EDIT,
    ACTION_REJECT,
    ACTION_REVOKE,
    decision_block_id,
)
from .mrkdwn import escape_cut
from .notices import allowance_line, delegation_lines, waited_text
from .outbox import HOME, Renderer, Write

__all__ = [
    "HOME_SETTLE",
    "HOME_TAB",
    "allowance_blocks",
    "home_entry",
    "home_intent",
    "home_renderer",
    "home_view",
]

HOME_TAB = "opsgate.home"
"""The method of an intent row: "publish `params["user"]`'s Home tab as it is when sent"."""

HOME_SETTLE = 2.0
"""Seconds a republished tab waits for the changes after the one that owed it
(`OutboxEntry.settle`): a person's tab is published at most once per `HOME_SETTLE`."""


_SHOWN_MAX = 8
"""Calls shown per list (a Home tab holds at most 100 blocks)."""
_ARG_LIMIT = 600


def home_view(home: HomeView) -> dict[str, Any]:
    blocks: list[Block] = [HeaderBlock(text=PlainTextObject(text="OpsGate"))]
    blocks.append(section("*Waiting for your decision*"))
    if not home.to_decide:
        blocks.append(_note("Nothing waits for your decision right now."))
    for call in home.to_decide[:_SHOWN_MAX]:
        blocks += card_body(call, _ARG_LIMIT)
        if call.asked_at is not None:
            blocks.append(_note(f"Waiting since {waited_text(call.asked_at)}"))
        blocks += _decision_buttons(call)
        blocks.append(DividerBlock())
    blocks.append(section("*Your requests waiting for approval*"))
    if not home.waiting:
        blocks.append(_note("None of your requests is waiting."))
    for call in home.waiting[:_SHOWN_MAX]:
        blocks += card_body(call, _ARG_LIMIT)
    blocks.append(section("*Active allowances*"))
    blocks += allowance_blocks(home.allowances) or [_note("No allowances are active.")]
    blocks += _freeze_blocks(home)
    if home.delegations:
        blocks.append(section("*Delegations*\n" + delegation_lines(home.user, home.delegations)))
    blocks.append(section("*Policy*\n" + escape_cut(home.policy, 2500)))
    view = View(type="home", blocks=blocks[:100])
    result: dict[str, Any] = view.to_dict()
    return result


def home_entry(home: HomeView) -> OutboxEntry:
    """The outbox row publishing `home` as drawn (`views.publish`): it supersedes the person's
    unsent one, and settles unless the person just opened the tab."""
    params = {"user_id": home.user, "view": home_view(home)}
    settle = 0.0 if home.opened else HOME_SETTLE
    return OutboxEntry("views.publish", params, HOME, key=f"home:{home.user}", settle=settle)


def home_intent(user: str, team: str | None) -> OutboxEntry:
    """The intent to publish `user`'s tab after a change they see: drawn when it is sent,
    once the burst of changes quieted."""
    params = {"user": user, "team": team}
    return OutboxEntry(HOME_TAB, params, HOME, key=f"home:{user}", settle=HOME_SETTLE)


DrawHome = Callable[[str, str | None], Awaitable[HomeView]]
"""A person's Home tab as it is now (user, team): the run service's `Home.view`."""


def home_renderer(view: DrawHome) -> Renderer:
    """The outbox's renderer for `HOME_TAB` rows: the tab drawn now (publishing it again is
    harmless, so a row tried before needs no look first)."""

    async def render(params: Mapping[str, Any], _retried: bool) -> Write | None:
        user = str(params.get("user") or "")
        if not user:
            return None
        team = params.get("team")
        home = await view(user, str(team) if team else None)
        return Write("views.publish", {"user_id": user, "view": home_view(home)})

    return render


def allowance_blocks(allowances: Sequence[AllowanceInfo]) -> list[Block]:
    """One line per allowance with its Revoke button (the button carries the allowance id)."""
    blocks: list[Block] = []
    for allowance in allowances[:20]:
        blocks.append(section(allowance_line(allowance)))
        blocks.append(
            ActionsBlock(
                elements=[
                    ButtonElement(
                        text=PlainTextObject(text="Revoke"),
                        action_id=ACTION_REVOKE,
                        value=allowance.id,
                        style="danger",
                    )
                ]
            )
        )
    return blocks


def _decision_buttons(call: CardCall) -> list[Block]:
    """Approve, Reject, Edit; only Reject (and a line saying why) when the tab cannot show the
    whole call: what is approved must be what was shown, here as on the card."""
    # A previewed call is approved on its card, where the preview is shown.
    previewed = call.preview is not None
    shown_whole = call.locked is None and overflow(call, _ARG_LIMIT) is None and not previewed
    approve = ButtonElement(
        text=PlainTextObject(text="Approve"),
        action_id=ACTION_APPROVE,
        value=call.ledger_id,
        style="primary",
    )
    buttons = [
        *([approve] if shown_whole else []),
        ButtonElement(
            text=PlainTextObject(text="Reject"),
            action_id=ACTION_REJECT,
            value=call.ledger_id,
            style="danger",
        ),
    ]
    if call.can_edit and shown_whole:
        buttons.append(
            ButtonElement(
                text=PlainTextObject(text="Edit"), action_id=ACTION_EDIT, value=call.ledger_id
            )
        )
    block_id = decision_block_id(call.digest, call.ledger_id)
    actions = ActionsBlock(block_id=block_id, elements=buttons)
    if shown_whole:
        return [actions]
    return [_note(_PREVIEW_ON_CARD if previewed else _NOT_SHOWN_WHOLE), actions]


_PREVIEW_ON_CARD = (
    ":mag: Its rule shows a preview of what it would do: approve or edit it on the card in its "
    "thread, where the preview is."
)
_NOT_SHOWN_WHOLE = (
    ":no_entry: Its arguments are too long to show here whole: approve or edit it on the card "
    "in its thread, where they are attached in full."
)


def _note(text: str) -> ContextBlock:
    return ContextBlock(elements=[MarkdownTextObject(text=text)])


def _freeze_blocks(home: HomeView) -> list[Block]:
    """Change freezes in force and break-glass uses to review (`bot.slack.freezes`)."""
    blocks: list[Block] = []
    if home.freezes:
        blocks.append(
            section("*Change freezes in force*\n" + "\n".join(freeze_lines(home.freezes)))
        )
    if home.unreviewed:
        lines = unreviewed_lines(home.unreviewed[:20])
        blocks.append(section("*Break-glass uses to review*\n" + "\n".join(lines)))
    return blocks

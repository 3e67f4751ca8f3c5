"""The local workspace speaks Slack: its Web API answers the calls the bot makes with the shapes
Slack answers them with, and what it sends the bot has the shapes of Slack's requests.

Shapes are checked against the recorded Slack payloads in tests/fixtures/slack/ (copied from
/work/shared/fixtures/slack, provenance in SOURCE.md there) and against the test suite's Slack
stand-in, through a real slack_sdk client over loopback HTTP.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.workspace import events
from bot.workspace.state import BOT, TEAM, WorkspaceState
from bot.workspace.web_api import WebAPI
from tests.support.loopback import serve_on_loopback
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_requests import load_fixture

TOKEN = "xoxb-local-test"
OPS = "C0OPS"


@pytest.fixture
async def workspace(tmp_path: Path) -> AsyncIterator[tuple[AsyncWebClient, WorkspaceState]]:
    from aiohttp import web

    state = WorkspaceState(tmp_path / "workspace.db")
    app = web.Application()
    api = WebAPI(state, token=TOKEN, base_url="http://127.0.0.1:0")
    app.add_routes(api.routes())
    runner, base = await serve_on_loopback(app)
    api.base_url = base
    try:
        yield AsyncWebClient(token=TOKEN, base_url=f"{base}/api/"), state
    finally:
        await runner.cleanup()
        state.close()


@pytest.fixture
async def standin() -> AsyncIterator[AsyncWebClient]:
    async with SlackAPIStandIn() as slack:
        yield AsyncWebClient(token=TOKEN, base_url=slack.url)


def keys(value: Any) -> Any:
    """The shape of a JSON value: its keys, nested (lists by their first item)."""
    if isinstance(value, Mapping):
        return {k: keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [keys(value[0])] if value else []
    return type(value).__name__


def has_shape(value: Any, shape: Any) -> bool:
    """`value` has at least every key `shape` has, nested."""
    if isinstance(shape, dict):
        return isinstance(value, dict) and all(
            k in value and has_shape(value[k], v) for k, v in shape.items()
        )
    if isinstance(shape, list) and shape:
        return isinstance(value, list) and bool(value) and has_shape(value[0], shape[0])
    return True


CARD = [
    {"type": "header", "text": {"type": "plain_text", "text": "Approval needed"}},
    {
        "type": "actions",
        "block_id": "decision",
        "elements": [
            {
                "type": "button",
                "action_id": "opsgate_approve",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": "ledger-1",
            }
        ],
    },
]


async def _calls(client: AsyncWebClient, trigger: str) -> dict[str, Any]:
    """The calls the bot makes, in the order it makes them; each method's answer."""
    out: dict[str, Any] = {"auth.test": (await client.auth_test()).data}
    posted = await client.chat_postMessage(channel=OPS, text="hi <@U0SAM>")
    out["chat.postMessage"] = posted.data
    thread = str(posted["ts"])
    card = await client.chat_postMessage(channel=OPS, thread_ts=thread, text="card", blocks=CARD)
    out["chat.update"] = (
        await client.chat_update(channel=OPS, ts=card["ts"], text="decided", blocks=CARD)
    ).data
    out["reactions.add"] = (
        await client.reactions_add(channel=OPS, timestamp=thread, name="eyes")
    ).data
    out["reactions.remove"] = (
        await client.reactions_remove(channel=OPS, timestamp=thread, name="eyes")
    ).data
    started = await client.chat_startStream(
        channel=OPS, thread_ts=thread, recipient_user_id="U0RILEY", recipient_team_id=TEAM
    )
    out["chat.startStream"] = started.data
    out["chat.appendStream"] = (
        await client.chat_appendStream(channel=OPS, ts=started["ts"], markdown_text="Hel")
    ).data
    out["chat.stopStream"] = (
        await client.chat_stopStream(channel=OPS, ts=started["ts"], markdown_text="lo")
    ).data
    out["chat.postEphemeral"] = (
        await client.chat_postEphemeral(channel=OPS, user="U0RILEY", text="only you")
    ).data
    out["conversations.replies"] = (
        await client.conversations_replies(channel=OPS, ts=thread, include_all_metadata=True)
    ).data
    out["conversations.history"] = (await client.conversations_history(channel=OPS)).data
    out["conversations.info"] = (await client.conversations_info(channel=OPS)).data
    out["users.info"] = (await client.users_info(user="U0SAM")).data
    out["chat.getPermalink"] = (await client.chat_getPermalink(channel=OPS, message_ts=thread)).data
    view = {"type": "modal", "title": {"type": "plain_text", "text": "Reject"}, "blocks": []}
    out["views.open"] = (await client.views_open(trigger_id=trigger, view=view)).data
    home = {"type": "home", "blocks": []}
    out["views.publish"] = (await client.views_publish(user_id="U0SAM", view=home)).data
    out["chat.delete"] = (await client.chat_delete(channel=OPS, ts=card["ts"])).data
    return out


async def test_the_web_api_answers_as_the_slack_stand_in_does(
    workspace: tuple[AsyncWebClient, WorkspaceState], standin: AsyncWebClient
) -> None:
    client, state = workspace
    state.triggers["1.2.3"] = "U0SAM"
    ours = await _calls(client, "1.2.3")
    theirs = await _calls(standin, "1.2.3")
    for method, answer in theirs.items():
        assert answer["ok"] and ours[method]["ok"], method
        assert has_shape(ours[method], keys(answer)), (method, keys(ours[method]), keys(answer))


async def test_a_posted_message_has_the_shape_of_a_bot_message_slack_sends(
    workspace: tuple[AsyncWebClient, WorkspaceState],
) -> None:
    """The `message` of a recorded block_actions payload is a bot message as Slack keeps it;
    the workspace's messages, read back, have every one of its keys."""
    client, _ = workspace
    posted = await client.chat_postMessage(channel=OPS, text="card", blocks=CARD)
    recorded = load_fixture("block_actions_button_click.json")["message"]
    history = await client.conversations_history(channel=OPS)
    shape = keys(recorded) | {"blocks": []}  # the recorded blocks are other blocks than ours
    assert has_shape(posted["message"], shape)
    assert has_shape(history["messages"][0], shape)
    assert history["messages"][0]["bot_id"] == BOT.bot_id


async def test_errors_are_slacks(workspace: tuple[AsyncWebClient, WorkspaceState]) -> None:
    client, _ = workspace
    posted = await client.chat_postMessage(channel=OPS, text="x")
    await client.reactions_add(channel=OPS, timestamp=posted["ts"], name="eyes")
    for call, error in [
        (client.reactions_add(channel=OPS, timestamp=posted["ts"], name="eyes"), "already_reacted"),
        (client.chat_postMessage(channel="C0NOWHERE", text="x"), "channel_not_found"),
        (
            client.chat_appendStream(channel=OPS, ts=posted["ts"], markdown_text="x"),
            "message_not_in_streaming_state",
        ),
        (client.views_open(trigger_id="never-given", view={"type": "modal"}), "expired_trigger_id"),
        (client.chat_update(channel=OPS, ts="1.000001", text="x"), "message_not_found"),
    ]:
        with pytest.raises(SlackApiError) as raised:
            await call
        assert raised.value.response["error"] == error
    other = AsyncWebClient(token="xoxb-someone-else", base_url=client.base_url)
    with pytest.raises(SlackApiError) as raised:
        await other.auth_test()
    assert raised.value.response["error"] == "invalid_auth"


# -- what the workspace sends the bot ------------------------------------------------------------


def test_its_signature_is_slacks() -> None:
    vector = load_fixture("signature_test_vector.json")
    headers = events.sign(
        vector["signing_secret"], vector["raw_body"].encode(), int(vector["pinned_now"])
    )
    assert headers["X-Slack-Signature"] == vector["headers"]["X-Slack-Signature"]


def test_a_mention_has_the_shape_of_slacks() -> None:
    message = {"type": "message", "user": "U0RILEY", "text": f"<@{BOT.user_id}> hi", "ts": "1.5"}
    recorded = load_fixture("event_callback_app_mention.json")
    envelope = events.envelope(events.message_event(message, OPS, mention=True))
    assert has_shape(envelope, keys(recorded) | {"event": _without(recorded["event"], "blocks")})


def test_a_thread_reply_and_a_dm_have_the_shapes_of_slacks() -> None:
    reply = {"type": "message", "user": "U0RILEY", "text": "go on", "ts": "2.5", "thread_ts": "1.5"}
    recorded = load_fixture("message_channel_thread_reply.json")["event"]
    # `user_profile` is left out: Slack's own tests send it empty, and no listener reads it.
    assert has_shape(events.message_event(reply, OPS), keys(_without(recorded, "user_profile")))
    dm = {"type": "message", "user": "U0RILEY", "text": "hi", "ts": "3.5"}
    recorded = load_fixture("message_im_docs_example.json")["event"]
    event = events.message_event(dm, "D0RILEY")
    assert has_shape(event, keys(recorded)) and event["channel_type"] == "im"


def test_a_click_and_a_submission_have_the_shapes_of_slacks() -> None:
    message = {"type": "message", "user": BOT.user_id, "bot_id": BOT.bot_id, "app_id": BOT.app_id}
    message |= {"text": "card", "ts": "1.5", "team": TEAM, "blocks": CARD}
    action = {"action_id": "opsgate_approve", "block_id": "decision", "value": "ledger-1"}
    action |= {"type": "button", "text": {"type": "plain_text", "text": "Approve"}}
    click = events.block_actions(
        "U0SAM", OPS, message, action, trigger_id="1.2.3", response_url="http://x/hooks/1"
    )
    recorded = load_fixture("block_actions_button_click.json")
    shape = keys(recorded)
    shape["message"] = keys(_without(recorded["message"], "blocks"))
    assert has_shape(click, shape)
    view = {"id": "V1", "type": "modal", "callback_id": "opsgate_reject_modal", "blocks": []}
    submitted = events.view_submission("U0SAM", view, {"b": {"a": {"type": "x"}}}, "1.2.4")
    recorded = load_fixture("view_submission_modal.json")
    shape = keys(recorded)
    shape["view"] = {k: "" for k in ("id", "type", "callback_id", "state", "root_view_id")}
    shape["team"] = {"id": "", "domain": ""}  # the recording is of an Enterprise Grid team
    assert has_shape(submitted, shape)
    assert json.loads(json.dumps(submitted))["view"]["state"]["values"]["b"]["a"]["type"] == "x"


def _without(value: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k not in names}

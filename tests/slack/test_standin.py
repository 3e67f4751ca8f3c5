"""The Slack Web API stand-in and the signed-request helpers, checked against slack_sdk itself."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.cards import CardCall, approval_card
from bot.slack.modals import reject_modal
from tests.support.slack_api import SlackAPIStandIn, SlackCall
from tests.support.slack_requests import (
    app_mention,
    block_actions,
    event_body,
    interaction_body,
    load_fixture,
    message,
    sign,
    view_submission,
)

TOKEN = "xoxb-test-token"
CARD = approval_card(CardCall("led_1", "shell", "Run it", {"command": "uptime"}, "abc123", "U0REQ"))


@pytest.fixture
async def slack() -> AsyncIterator[SlackAPIStandIn]:
    async with SlackAPIStandIn() as standin:
        yield standin


@pytest.fixture
def client(slack: SlackAPIStandIn) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=slack.url)


async def test_post_message_is_recorded_with_blocks_decoded(
    slack: SlackAPIStandIn, client: AsyncWebClient
) -> None:
    assert slack.url.startswith("http://127.0.0.1:") and slack.url.endswith("/api/")
    first = await client.chat_postMessage(
        channel="C111", thread_ts="1678252212.229129", text="Approval needed", blocks=CARD
    )
    second = await client.chat_postMessage(channel="C111", text="again")

    assert first["ok"] is True and first["channel"] == "C111"
    assert abs(float(first["ts"]) - time.time()) < 60  # a Unix time: now
    assert float(second["ts"]) > float(first["ts"])
    assert first["message"]["blocks"] == CARD and first["message"]["user"] == "UBOT"
    [call] = await slack.wait_for("chat.postMessage", where=lambda c: "blocks" in c.params)
    assert call.params["blocks"] == CARD
    assert call.params["thread_ts"] == "1678252212.229129"
    assert call.token == TOKEN
    assert all(name.lower() != "authorization" for name in call.headers)
    assert call.ok and call.response["ts"] == first["ts"]
    assert slack.message("C111", first["ts"])["blocks"] == CARD  # type: ignore[index]
    assert len(slack.calls_to("chat.postMessage")) == 2


async def test_wait_for_wakes_on_the_call_and_times_out_with_a_clear_message(
    slack: SlackAPIStandIn, client: AsyncWebClient
) -> None:
    waiter = asyncio.create_task(slack.wait_for("reactions.add", count=2, timeout=5))
    await client.reactions_add(channel="C1", timestamp="1.000001", name="eyes")
    assert not waiter.done()
    await client.reactions_add(channel="C1", timestamp="1.000001", name="hourglass")
    calls = await waiter
    assert [c.params["name"] for c in calls] == ["eyes", "hourglass"]
    with pytest.raises(AssertionError, match=r"'chat.update'.*reactions.add"):
        await slack.wait_for("chat.update", timeout=0.05)


async def test_rate_limit_is_retried_by_slack_sdk(
    slack: SlackAPIStandIn, client: AsyncWebClient
) -> None:
    client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=1))
    slack.fail_next("chat.postMessage", status=429, retry_after=0)
    response = await client.chat_postMessage(channel="C1", text="hi")
    assert response["ok"] is True
    first, second = slack.calls_to("chat.postMessage")
    assert (first.status, first.response) == (429, {"ok": False, "error": "ratelimited"})
    assert second.ok


async def test_rate_limit_without_retry_handler_surfaces(
    slack: SlackAPIStandIn, client: AsyncWebClient
) -> None:
    slack.fail_next("chat.update", status=429, retry_after=7)
    with pytest.raises(SlackApiError) as caught:
        await client.chat_update(channel="C1", ts="1.0", text="x")
    assert caught.value.response.status_code == 429
    assert caught.value.response.headers["Retry-After"] == "7"


async def test_ok_false_surfaces_as_slack_api_error(
    slack: SlackAPIStandIn, client: AsyncWebClient
) -> None:
    slack.fail_next("chat.postMessage", error="channel_not_found", times=2)
    for _ in range(2):
        with pytest.raises(SlackApiError) as caught:
            await client.chat_postMessage(channel="C404", text="hi")
        assert caught.value.response["error"] == "channel_not_found"
    assert (await client.chat_postMessage(channel="C404", text="hi"))["ok"] is True
    with pytest.raises(SlackApiError, match="no_text"), pytest.warns(UserWarning, match="text"):
        await client.chat_postMessage(channel="C1", text="")
    with pytest.raises(SlackApiError, match="unknown_method"):
        await client.api_call("nope.nothing")
    with pytest.raises(SlackApiError, match="invalid_blocks"):
        await client.chat_postMessage(channel="C1", text="x", blocks=[{"type": "section"}] * 51)


async def test_auth(slack: SlackAPIStandIn) -> None:
    answer = await AsyncWebClient(token=TOKEN, base_url=slack.url).auth_test()
    assert {k: answer[k] for k in ("team_id", "user", "user_id", "bot_id")} == {
        "team_id": "T0TEST",
        "user": "opsgate",
        "user_id": "UBOT",
        "bot_id": "BBOT",
    }
    with pytest.raises(SlackApiError, match="not_authed"):
        await AsyncWebClient(base_url=slack.url).auth_test()
    async with SlackAPIStandIn(token="xoxb-right") as strict:
        with pytest.raises(SlackApiError, match="invalid_auth"):
            await AsyncWebClient(token="xoxb-wrong", base_url=strict.url).auth_test()
        assert (await AsyncWebClient(token="xoxb-right", base_url=strict.url).auth_test())["ok"]


async def test_form_json_query_and_multipart_bodies_are_parsed(
    slack: SlackAPIStandIn, client: AsyncWebClient
) -> None:
    await client.api_call(
        "chat.postMessage", data={"channel": "C1", "text": "form", "blocks": json.dumps(CARD)}
    )
    await client.api_call("chat.postMessage", json={"channel": "C1", "text": "json"})
    await client.users_info(user="U0ABC")  # slack_sdk sends params= as the query string
    form = aiohttp.FormData()
    form.add_field("channel", "C1")
    form.add_field("file", b"content", filename="out.txt", content_type="text/plain")
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{slack.url}auth.test", data=form, headers={"Authorization": "Bearer x"}),
    ):
        pass
    posts = slack.calls_to("chat.postMessage")
    assert posts[0].params == {"channel": "C1", "text": "form", "blocks": CARD}
    assert posts[1].params == {"channel": "C1", "text": "json"}
    assert slack.calls_to("users.info")[0].params == {"user": "U0ABC"}
    multipart = slack.calls_to("auth.test")[0]
    assert multipart.params["channel"] == "C1"
    assert multipart.params["file"] == {
        "filename": "out.txt",
        "content_type": "text/plain",
        "content": b"content",
    }
    assert multipart.token == "x"


async def test_message_lifecycle_methods(slack: SlackAPIStandIn, client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel="C1", text="card", blocks=CARD)
    updated = await client.chat_update(channel="C1", ts=posted["ts"], text="done", blocks=[])
    assert updated["ts"] == posted["ts"] and updated["text"] == "done"
    assert slack.message("C1", posted["ts"])["text"] == "done"  # type: ignore[index]
    ephemeral = await client.chat_postEphemeral(channel="C1", user="U1", text="already decided")
    assert ephemeral["message_ts"]
    link = await client.chat_getPermalink(channel="C1", message_ts="1700000000.000100")
    assert link["permalink"].endswith("/archives/C1/p1700000000000100")
    await client.chat_delete(channel="C1", ts=posted["ts"])
    assert slack.message("C1", posted["ts"]) is None
    await client.reactions_add(channel="C1", timestamp="1.0", name="eyes")
    with pytest.raises(SlackApiError, match="already_reacted"):
        await client.reactions_add(channel="C1", timestamp="1.0", name="eyes")
    await client.reactions_remove(channel="C1", timestamp="1.0", name="eyes")
    with pytest.raises(SlackApiError, match="no_reaction"):
        await client.reactions_remove(channel="C1", timestamp="1.0", name="eyes")


async def test_views_users_groups_and_conversations(
    slack: SlackAPIStandIn, client: AsyncWebClient
) -> None:
    opened = await client.views_open(trigger_id="123.456.abc", view=reject_modal("led_1"))
    assert opened["view"]["callback_id"] == "opsgate_reject_modal"
    assert opened["view"]["private_metadata"] == "led_1"
    assert opened["view"]["id"].startswith("V")
    updated = await client.views_update(view_id=opened["view"]["id"], view=reject_modal("led_2"))
    assert updated["view"]["private_metadata"] == "led_2"

    slack.set_user("U0BOSS", name="boss", is_admin=True)
    boss = (await client.users_info(user="U0BOSS"))["user"]
    assert (boss["id"], boss["name"], boss["is_admin"]) == ("U0BOSS", "boss", True)
    slack.set_usergroup_members("S0OPS", ["U0BOSS", "U0TWO"])
    group = await client.usergroups_users_list(usergroup="S0OPS")
    assert group["users"] == ["U0BOSS", "U0TWO"]
    with pytest.raises(SlackApiError, match="no_such_subteam"):
        await client.usergroups_users_list(usergroup="S0NONE")
    info = (await client.conversations_info(channel="D0DM"))["channel"]
    assert info["is_im"] is True and info["is_channel"] is False
    slack.respond_with("team.info", {"ok": True, "team": {"id": "T0TEST"}})
    assert (await client.team_info())["team"] == {"id": "T0TEST"}


async def test_streaming_and_its_absence(slack: SlackAPIStandIn, client: AsyncWebClient) -> None:
    streamer = await client.chat_stream(channel="D0DM", thread_ts="1.000001", buffer_size=5)
    await streamer.append(markdown_text="Hello ")
    await streamer.append(markdown_text="there, ")
    stopped = await streamer.stop(markdown_text="done.")
    ts = stopped["ts"]
    assert slack.message("D0DM", ts)["text"] == "Hello there, done."  # type: ignore[index]
    assert [c.method for c in slack.calls if c.method.startswith("chat.")] == [
        "chat.startStream",
        "chat.appendStream",
        "chat.stopStream",
    ]
    with pytest.raises(SlackApiError, match="message_not_in_streaming_state"):
        await client.chat_appendStream(channel="D0DM", ts=ts, markdown_text="late")

    # Outside DMs Slack requires the recipient.
    with pytest.raises(SlackApiError, match="invalid_arguments"):
        await client.chat_startStream(channel="C1", thread_ts="1.000001")
    started = await client.chat_startStream(
        channel="C1", thread_ts="1.000001", recipient_user_id="U1", recipient_team_id="T0TEST"
    )
    assert started["channel"] == "C1" and started["ts"]

    slack.set_streaming_supported(False)
    for call in (
        client.chat_startStream(channel="D0DM", thread_ts="1.000001"),
        client.chat_appendStream(channel="C1", ts=started["ts"], markdown_text="x"),
        client.chat_stopStream(channel="C1", ts=started["ts"]),
    ):
        with pytest.raises(SlackApiError, match="unknown_method"):
            await call


async def test_file_upload_v2_lands_whole(slack: SlackAPIStandIn, client: AsyncWebClient) -> None:
    content = "line\n" * 3000
    response = await client.files_upload_v2(
        content=content,
        filename="output.txt",
        title="Command output",
        channel="C1",
        thread_ts="1.000001",
        initial_comment="full output",
    )
    assert response["ok"] is True and response["file"]["name"] == "output.txt"
    [upload] = slack.uploaded_files
    assert upload.text == content
    assert (upload.filename, upload.title) == ("output.txt", "Command output")
    assert (upload.channel_id, upload.thread_ts) == ("C1", "1.000001")
    assert slack.uploaded(upload.file_id) == upload
    methods = [c.method for c in slack.calls]
    assert methods == ["files.getUploadURLExternal", "upload", "files.completeUploadExternal"]
    assert slack.calls[0].response["upload_url"].startswith(slack.url.removesuffix("api/"))


async def test_response_url_posts_are_recorded(slack: SlackAPIStandIn) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(slack.response_url("card"), json={"text": "hi"}) as response,
    ):
        assert response.status == 200
    [call] = await slack.wait_for("response_url")
    assert call.params == {"text": "hi", "_hook": "card"}


# -- signed requests ---------------------------------------------------------------------------


def test_sign_reproduces_the_known_answer_vector() -> None:
    vector = load_fixture("signature_test_vector.json")
    headers = sign(
        vector["signing_secret"],
        vector["raw_body"].encode(),
        int(vector["headers"]["X-Slack-Request-Timestamp"]),
    )
    assert headers == {
        "X-Slack-Request-Timestamp": vector["headers"]["X-Slack-Request-Timestamp"],
        "X-Slack-Signature": vector["headers"]["X-Slack-Signature"],
    }


def test_slack_sdk_verifier_accepts_sign_output() -> None:
    secret = "opsgate-test-signing-secret"
    body = event_body(app_mention("<@UBOT> hi", channel="C1", user="U1", ts="1.2", event_id="E1"))
    verifier = SignatureVerifier(secret)
    assert verifier.is_valid_request(body, sign(secret, body))
    assert not verifier.is_valid_request(body + b" ", sign(secret, body))
    assert not verifier.is_valid_request(body, sign("other-secret", body))
    assert not verifier.is_valid_request(body, sign(secret, body, int(time.time()) - 600))


def keys_of(node: Any) -> Any:
    """The shape of a JSON value: its keys, recursively (values ignored)."""
    if isinstance(node, dict):
        return {key: keys_of(value) for key, value in node.items()}
    if isinstance(node, list):
        return [keys_of(value) for value in node[:1]]
    return None


def test_app_mention_is_shaped_like_the_fixture() -> None:
    body = app_mention(
        "<@UBOT> restart nginx",
        channel="C0OPS",
        user="U0REQ",
        ts="1700000001.000200",
        thread_ts="1700000000.000100",
        event_id="Ev0001",
    )
    fixture = load_fixture("event_callback_app_mention.json")
    fixture["event"]["thread_ts"] = "x"
    assert keys_of(body) == keys_of(fixture)
    event = body["event"]
    assert (event["text"], event["user"], event["channel"]) == (
        "<@UBOT> restart nginx",
        "U0REQ",
        "C0OPS",
    )
    assert event["ts"] == event["event_ts"] == "1700000001.000200"
    assert event["blocks"][0]["elements"][0]["elements"] == [
        {"type": "user", "user_id": "UBOT"},
        {"type": "text", "text": " restart nginx"},
    ]
    assert body["event_id"] == "Ev0001" and body["team_id"] == "T0TEST"
    assert body["authorizations"][0]["user_id"] == "UBOT"
    assert json.loads(event_body(body, event_id="Ev0002"))["event_id"] == "Ev0002"
    assert json.loads(event_body(body, event={"text": "x"}))["event"]["user"] == "U0REQ"


def test_message_variants() -> None:
    top = message("hi", channel="D0DM", user="U1", ts="2.000001", event_id="E1")
    assert top["event"]["channel_type"] == "im" and "thread_ts" not in top["event"]
    assert keys_of(top)["event"].keys() == keys_of(load_fixture("message_im_docs_example"))[
        "event"
    ].keys() | {"team"}
    reply = message(
        "more", channel="C0OPS", user="U1", ts="2.000002", thread_ts="2.000001", event_id="E2"
    )
    fixture = load_fixture("message_channel_thread_reply.json")
    del fixture["enterprise_id"]  # the stand-in workspace is not an Enterprise Grid org
    assert keys_of(reply) == keys_of(fixture)
    assert reply["event"]["thread_ts"] == "2.000001"
    assert reply["event"]["channel_type"] == "channel"
    dm_reply = message("x", channel="D0DM", user="U1", ts="3.1", thread_ts="3.0", event_id="E3")
    assert dm_reply["event"]["channel_type"] == "im"
    channel_top = message("x", channel="C0OPS", user="U1", ts="3.1", event_id="E4")
    assert "thread_ts" not in channel_top["event"] and "parent_user_id" not in channel_top["event"]
    bot = message("beep", channel="C0OPS", user="UBOT", ts="4.1", event_id="E5", bot_id="BBOT")
    assert bot["event"]["bot_id"] == "BBOT" and bot["event"]["bot_profile"]["id"] == "BBOT"
    assert (
        keys_of(bot)["event"].keys() == keys_of(load_fixture("message_bot_message"))["event"].keys()
    )
    join = message(
        "joined", channel="C0OPS", user="U9", ts="5.1", event_id="E6", subtype="channel_join"
    )
    assert join["event"]["subtype"] == "channel_join"


async def test_interaction_bodies_parse_the_way_bolt_parses_them() -> None:
    click = block_actions(
        "opsgate_approve", "led_1", user="U0BOSS", channel="C0OPS", message_ts="7.1", blocks=CARD
    )
    fixture = load_fixture("block_actions_button_click.json")
    fixture["message"]["blocks"] = click["message"]["blocks"]
    assert keys_of(click) == keys_of(fixture)
    assert (click["message"]["user"], click["message"]["bot_id"]) == ("UBOT", "BBOT")
    assert click["user"]["id"] == "U0BOSS" and click["channel"]["id"] == "C0OPS"
    assert click["actions"][0]["value"] == "led_1"
    assert click["actions"][0]["text"]["text"] == "Approve"
    assert click["container"]["message_ts"] == click["message"]["ts"] == "7.1"
    body = interaction_body(click)
    assert body.startswith(b"payload=")
    parsed = AsyncBoltRequest(
        body=body.decode(), headers={"content-type": ["application/x-www-form-urlencoded"]}
    )
    assert parsed.body == click
    assert json.loads(urllib.parse.parse_qs(body.decode())["payload"][0]) == click

    submission = view_submission(
        "opsgate_reject_modal", "led_1", {"reason": {"reason_input": "no"}}, user="U0BOSS"
    )
    parsed_view = AsyncBoltRequest(
        body=interaction_body(submission).decode(),
        headers={"content-type": ["application/x-www-form-urlencoded"]},
    )
    assert parsed_view.body["view"]["state"]["values"]["reason"]["reason_input"]["value"] == "no"


def test_slack_call_is_frozen() -> None:
    call = SlackCall("auth.test", {}, {}, None)
    with pytest.raises(AttributeError):
        call.method = "x"  # type: ignore[misc]

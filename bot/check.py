"""`opsgate check`: is the configuration complete, does Slack accept the token, is the LLM there?"""

from __future__ import annotations

from typing import TextIO

import httpx
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from .errors import BotError
from .policy import Policy
from .settings import Settings, load_settings

__all__ = ["run_check"]


async def run_check(*, out: TextIO, settings: Settings | None = None) -> int:
    """Print one line per check, in plain words; exit status 1 if any failed."""
    failures = 0

    def report(ok: bool, text: str) -> None:
        nonlocal failures
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {text}", file=out)

    if settings is None:
        try:
            settings = load_settings(mode="socket")
        except BotError as exc:
            report(False, f"configuration: {exc}")
            return 1
    report(True, "configuration: all required settings are present")

    if settings.opsgate_policy:
        try:
            Policy.load(settings.opsgate_policy)
            report(True, f"policy: {settings.opsgate_policy} is valid")
        except BotError as exc:
            report(False, f"policy: {exc}")
    else:
        report(True, "policy: no policy file; using the built-in defaults")

    client = AsyncWebClient(
        token=settings.slack_bot_token.get_secret_value(), base_url=settings.slack_api_url
    )
    try:
        auth = await client.auth_test()
        report(True, f"slack: signed in as {auth.get('user')} in team {auth.get('team')}")
    except SlackApiError as exc:
        report(False, f"slack: auth.test said {exc.response.get('error')!r}; check SLACK_BOT_TOKEN")
    except Exception as exc:
        report(False, f"slack: cannot reach {settings.slack_api_url} ({type(exc).__name__})")

    base = settings.openai_base_url.rstrip("/")
    key = settings.openai_api_key.get_secret_value()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.get(f"{base}/models", headers=headers)
        if response.status_code == 401:
            report(False, f"llm: {base} refused the key (401); check OPENAI_API_KEY")
        elif response.status_code >= 500:
            report(False, f"llm: {base} answered {response.status_code}")
        else:
            report(True, f"llm: {base} is reachable (model {settings.opsgate_model!r})")
    except httpx.HTTPError as exc:
        report(False, f"llm: cannot reach {base} ({type(exc).__name__}); check OPENAI_BASE_URL")
    return 1 if failures else 0

"""OpsGate's Slack app: a Bolt front end, a Slack-free run service, policy, approvals, store.

The layers and the life of one request are described in `docs/architecture.md`.

Every error the bot raises on purpose is a `BotError`; the tree is drawn in `bot/errors.py`.

Errors of the agent loop itself are `agent_core.AgentCoreError`s.
"""

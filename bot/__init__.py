"""OpsGate's Slack app: a Bolt front end, a Slack-free run service, policy, approvals, store.

The layers and the life of one request are described in `docs/architecture.md`.

Every error the bot raises on purpose is a `BotError`, so a caller (the CLI) can turn any of
them into one line:

    BotError
     ├── SettingsError            a setting is missing or malformed (bot.errors)
     ├── PolicyError              the policy file is wrong (bot.policy)
     ├── ToolLoadError            a `tools_modules` entry cannot be loaded (bot.tools)
     ├── McpServerError           an MCP tool server (bot.tools.mcp)
     │    ├── McpConfigError
     │    └── McpStartError
     ├── ObservabilityError       logging or the health server (bot.observability)
     │    ├── LogSettingError
     │    └── HealthServerError
     └── StoreError               the database (bot.store)
          ├── DatabaseLocked
          ├── DatabaseUnwritable
          ├── SchemaTooNew
          ├── InvalidTransition
          ├── UnknownSession
          └── UnknownCall

Errors of the agent loop itself are `agent_core.AgentCoreError`s.
"""

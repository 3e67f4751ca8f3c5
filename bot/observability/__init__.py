"""Operating the bot: Prometheus metrics, health and readiness endpoints, structured logs.

Slack-free building blocks: the app wires them in at start-up (`configure_logging`,
`serve_health` or `add_health_routes`) and at the points it counts (`Metrics`).
"""

from bot.errors import HealthServerError, LogSettingError, ObservabilityError

from .health import (
    CHECK_TIMEOUT,
    HealthServer,
    ReadinessCheck,
    ReadinessNote,
    Refresh,
    add_health_routes,
    health_app,
    not_ready_reasons,
    readiness_notes,
    serve_health,
    socket_mode_check,
)
from .logs import (
    EVENTS_LOGGER,
    QUIET_LIBRARIES,
    LogFormat,
    LogLevel,
    configure_logging,
    current_log_context,
    log_context,
    log_event,
    log_from_settings,
    mask_secrets,
)
from .metrics import (
    DECISION_BUCKETS,
    OTHER,
    TOOL_BUCKETS,
    Decision,
    LLMErrorKind,
    McpCallOutcome,
    Metrics,
    RunOutcome,
    ToolOutcome,
    classify_llm_error,
)

__all__ = [  # noqa: RUF022 -- plain sorted() order, as every package here
    "CHECK_TIMEOUT",
    "DECISION_BUCKETS",
    "Decision",
    "EVENTS_LOGGER",
    "HealthServer",
    "HealthServerError",
    "LLMErrorKind",
    "LogFormat",
    "LogLevel",
    "LogSettingError",
    "McpCallOutcome",
    "Metrics",
    "OTHER",
    "ObservabilityError",
    "QUIET_LIBRARIES",
    "ReadinessCheck",
    "ReadinessNote",
    "Refresh",
    "RunOutcome",
    "TOOL_BUCKETS",
    "ToolOutcome",
    "add_health_routes",
    "classify_llm_error",
    "configure_logging",
    "current_log_context",
    "health_app",
    "log_context",
    "log_event",
    "log_from_settings",
    "mask_secrets",
    "not_ready_reasons",
    "readiness_notes",
    "serve_health",
    "socket_mode_check",
]

# OpsGate: the Slack chat-ops agent. Build: docker build -t opsgate .
# Secrets come from the environment (docker run --env-file .env, or compose's env_file), never
# from the image: .dockerignore keeps .env out of the build context.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A dedicated non-root user: tool subprocesses run as this user too, and a non-root bot is what
# keeps them from reading the tokens out of /proc.
RUN groupadd --system opsgate \
    && useradd --system --gid opsgate --home-dir /data --shell /usr/sbin/nologin opsgate \
    && mkdir -p /data \
    && chown opsgate:opsgate /data

WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY agent_core ./agent_core
COPY bot ./bot
RUN pip install .

# The SQLite database lives on a volume (with PostgreSQL in OPSGATE_DB it stays empty).
ENV OPSGATE_DB=/data/opsgate.db \
    OPSGATE_PORT=3000
VOLUME ["/data"]
WORKDIR /data
USER opsgate

# Health and metrics (both modes) and, with `opsgate run --http`, Slack's requests.
EXPOSE 3000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('OPSGATE_PORT', '3000'), timeout=4)"]

STOPSIGNAL SIGTERM
CMD ["opsgate", "run"]

"""The Kubernetes manifests say what the app does: rendered with `kubectl kustomize`, checked
object by object, and the rendered container's command and environment started as a real
`opsgate` process that answers the rendered probes."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bot.policy import Policy
from bot.settings import Settings, load_settings
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn
from tests.support.socket_mode import SocketModeStandIn

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
OPSGATE = Path(sys.executable).with_name("opsgate")
SECRET_NAME = "opsgate"
Obj = dict[str, Any]

# What the Secret `opsgate` holds in these tests (the manifests never carry any of it).
SECRET_DATA = {
    "SLACK_BOT_TOKEN": "xoxb-test-token",
    "SLACK_APP_TOKEN": "xapp-1-A0TEST-secret",
    "SLACK_SIGNING_SECRET": "8f742231b10e8888abcd99yyyzzz85a5",
    "OPENAI_API_KEY": "sk-test-key-123",
    "OPSGATE_MODEL": "test-model",
}
SECRET_LOOKING = re.compile(r"xox[abpr]-|xapp-|sk-[A-Za-z0-9]{6}|postgres(ql)?://|password", re.I)


def kustomize(directory: Path, *components: Path, tmp_path: Path | None = None) -> list[Obj]:
    """`kubectl kustomize` of a directory, or of an overlay of it with components added (written
    in `tmp_path`: kustomize wants relative paths)."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render deploy/kubernetes"
    target = directory
    if components:
        assert tmp_path is not None
        target = tmp_path / "overlay"
        target.mkdir()
        overlay = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(directory, target)],
            "components": [os.path.relpath(c, target) for c in components],
        }
        (target / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    rendered = subprocess.run(
        [kubectl, "kustomize", str(target)], capture_output=True, text=True, timeout=60
    )
    assert rendered.returncode == 0, rendered.stderr
    return [obj for obj in yaml.safe_load_all(rendered.stdout) if obj]


def only(objects: list[Obj], kind: str) -> Obj:
    [obj] = [o for o in objects if o["kind"] == kind]
    return obj


def kinds(objects: list[Obj]) -> list[str]:
    return sorted(o["kind"] for o in objects)


def container(objects: list[Obj]) -> Obj:
    bots: list[Obj] = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    [bot] = bots
    return bot


def env_of(bot: Obj) -> dict[str, Obj]:
    return {entry["name"]: entry for entry in bot["env"]}


def walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, dict):
        for item in value.values():
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


@pytest.fixture(scope="module")
def base() -> list[Obj]:
    return kustomize(KUBERNETES / "base")


@pytest.fixture(scope="module")
def socket_mode() -> list[Obj]:
    return kustomize(KUBERNETES / "socket-mode")


def test_base_is_http_mode_with_two_replicas_a_service_and_a_disruption_budget(
    base: list[Obj],
) -> None:
    assert kinds(base) == ["ConfigMap", "Deployment", "PodDisruptionBudget", "Service"]
    deployment = only(base, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert container(base)["command"] == ["opsgate", "run", "--http"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()

    pdb = only(base, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert 1 <= pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]

    service = only(base, "Service")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    [port] = service["spec"]["ports"]
    named = {p["name"]: p["containerPort"] for p in container(base)["ports"]}
    assert port["targetPort"] in named


def test_ports_and_probes_are_the_apps(base: list[Obj], socket_mode: list[Obj]) -> None:
    """The port is OPSGATE_PORT (the image's EXPOSE, the settings' default); the probes are the
    endpoints the app serves: /healthz for liveness and start-up, /readyz for readiness."""
    expose = [
        ln.split()[1]
        for ln in (ROOT / "Dockerfile").read_text().splitlines()
        if ln.startswith("EXPOSE")
    ]
    for objects in (base, socket_mode):
        bot = container(objects)
        [port] = bot["ports"]
        assert port["containerPort"] == Settings.model_fields["opsgate_port"].default == 3000
        assert [str(port["containerPort"])] == expose
        assert env_of(bot)["OPSGATE_PORT"]["value"] == str(port["containerPort"])
        probes = {
            kind: bot[f"{kind}Probe"]["httpGet"] for kind in ("startup", "liveness", "readiness")
        }
        assert {k: p["path"] for k, p in probes.items()} == {
            "startup": "/healthz",
            "liveness": "/healthz",
            "readiness": "/readyz",
        }
        assert {p["port"] for p in probes.values()} == {port["name"]}
        assert bot["readinessProbe"]["timeoutSeconds"] > 2  # each readiness check has 2 s
        grace = only(objects, "Deployment")["spec"]["template"]["spec"]
        assert grace["terminationGracePeriodSeconds"] > 2 * Settings().opsgate_shutdown_grace


def test_no_secret_is_shipped_only_referenced(base: list[Obj], socket_mode: list[Obj]) -> None:
    for objects in (base, socket_mode):
        assert "Secret" not in kinds(objects)
        for value in walk(objects):
            if isinstance(value, str):
                assert not SECRET_LOOKING.search(value), value
        bot = container(objects)
        assert [source["secretRef"]["name"] for source in bot["envFrom"]] == [SECRET_NAME]
        secret_names = {"SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "OPSGATE_DB"}
        for name, entry in env_of(bot).items():
            if name in secret_names:
                assert "value" not in entry, name
                ref = entry["valueFrom"]["secretKeyRef"]
                assert (ref["name"], ref["key"]) == (SECRET_NAME, name)
        assert "secretKeyRef" in env_of(bot)["OPSGATE_DB"]["valueFrom"]
        known = {name.upper() for name in Settings.model_fields} | {"HOME"}
        assert set(env_of(bot)) <= known


def test_the_pod_runs_non_root_on_a_read_only_root_filesystem(
    base: list[Obj], socket_mode: list[Obj]
) -> None:
    for objects in (base, socket_mode):
        pod = only(objects, "Deployment")["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] not in (0, None)
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert pod["automountServiceAccountToken"] is False
        assert pod["shareProcessNamespace"] is True  # PID 1 reaps run_command's orphans
        bot = container(objects)
        security = bot["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        writable = {
            m["mountPath"]: volumes[m["name"]] for m in bot["volumeMounts"] if not m.get("readOnly")
        }
        assert set(writable) == {"/data", "/tmp"}  # the working directory (HOME) and /tmp
        assert all("emptyDir" in volume for volume in writable.values())
        assert env_of(bot)["HOME"]["value"] == "/data"


def policy_file(objects: list[Obj]) -> tuple[Path, str]:
    """Where OPSGATE_POLICY points, and the text the mounted ConfigMap puts there."""
    bot = container(objects)
    path = Path(env_of(bot)["OPSGATE_POLICY"]["value"])
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    [mount] = [m for m in bot["volumeMounts"] if m["mountPath"] == str(path.parent)]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    config_map = only(objects, "ConfigMap")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    return path, config_map["data"][path.name]


def test_the_shipped_policy_is_valid(base: list[Obj]) -> None:
    _, text = policy_file(base)
    policy = Policy.from_toml(text, source="opsgate-policy")
    assert policy.defaults == Policy.default().defaults  # the built-in defaults, written out
    assert policy.tools["run_command"].approval == "always"


def test_socket_mode_is_the_base_without_a_service(base: list[Obj], socket_mode: list[Obj]) -> None:
    assert kinds(socket_mode) == ["ConfigMap", "Deployment", "PodDisruptionBudget"]
    bot = container(socket_mode)
    assert bot["command"] == ["opsgate", "run"]
    env = env_of(bot)
    assert "SLACK_SIGNING_SECRET" not in env
    assert env["SLACK_APP_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "SLACK_APP_TOKEN"
    assert only(socket_mode, "Deployment")["spec"]["replicas"] == 2
    # Everything else is the base's.
    http = container(base)
    same = {"ports", "securityContext", "volumeMounts", "livenessProbe", "readinessProbe"}
    assert {k: bot[k] for k in same} == {k: http[k] for k in same}


def test_monitoring_components_scrape_the_metrics_port(base: list[Obj], tmp_path: Path) -> None:
    components = KUBERNETES / "components"
    with_monitor = kustomize(KUBERNETES / "base", components / "servicemonitor", tmp_path=tmp_path)
    monitor = only(with_monitor, "ServiceMonitor")
    [endpoint] = monitor["spec"]["endpoints"]
    service = only(with_monitor, "Service")
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )

    (tmp_path / "socket").mkdir()
    with_pods = kustomize(
        KUBERNETES / "socket-mode", components / "podmonitor", tmp_path=tmp_path / "socket"
    )
    pods = only(with_pods, "PodMonitor")
    [endpoint] = pods["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in container(with_pods)["ports"]}
    labels = only(with_pods, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pods["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_settings_accept_the_rendered_environment(
    base: list[Obj], socket_mode: list[Obj], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rendered env, with the Secret filled in, is a valid configuration for its mode."""
    for name in os.environ:
        if name.startswith(("SLACK_", "OPENAI_", "OPSGATE_")):
            monkeypatch.delenv(name)
    for objects, mode in ((base, "http"), (socket_mode, "socket")):
        environment = pod_environment(objects, tmp_path, db="postgresql://u:p@db:5432/opsgate")
        with monkeypatch.context() as patch:
            for name, value in environment.items():
                patch.setenv(name, value)
            settings = load_settings(mode=mode, env_file=None)  # type: ignore[arg-type]
        assert settings.opsgate_log_format == "json"
        assert str(settings.opsgate_db).startswith("postgresql://")


def pod_environment(objects: list[Obj], tmp_path: Path, *, db: str) -> dict[str, str]:
    """The container's environment as the kubelet builds it from the Secret (`SECRET_DATA`
    and `db` as OPSGATE_DB), with the policy ConfigMap written under `tmp_path`."""
    secret = {**SECRET_DATA, "OPSGATE_DB": db}
    environment = dict(secret)  # envFrom: every key of the Secret
    for name, entry in env_of(container(objects)).items():
        if "value" in entry:
            environment[name] = entry["value"]
        else:
            environment[name] = secret[entry["valueFrom"]["secretKeyRef"]["key"]]
    path, text = policy_file(objects)
    local = tmp_path / path.name
    local.write_text(text)
    environment["OPSGATE_POLICY"] = str(local)
    environment["HOME"] = str(tmp_path)
    return environment


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Child:
    """A started child process; its stderr read line by line as it comes."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            async with self._changed:
                self.lines.append(raw.decode(errors="replace"))
                self._changed.notify_all()

    async def wait_line(self, needle: str, timeout: float = 60) -> None:
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: any(needle in line for line in self.lines))
        except TimeoutError:
            raise AssertionError(f"no log line with {needle!r}:\n{''.join(self.lines)}") from None


@asynccontextmanager
async def rendered_container(
    objects: list[Obj], tmp_path: Path, **extra: str
) -> AsyncIterator[tuple[_Child, str, Obj]]:
    """The rendered container's command and environment as a child process (on SQLite and a
    free port here); yields it, its base URL and the container. Stopped with SIGTERM, as the
    kubelet does, and it must exit 0."""
    bot = container(objects)
    port = _free_port()
    environment = pod_environment(objects, tmp_path, db=str(tmp_path / "opsgate.db"))
    environment.update(PATH=os.environ.get("PATH", ""), OPSGATE_PORT=str(port), **extra)
    command = bot["command"]
    assert command[0] == "opsgate"
    child = _Child(
        await asyncio.create_subprocess_exec(
            str(OPSGATE),
            *command[1:],
            cwd=tmp_path,
            env=environment,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
    )
    try:
        yield child, f"http://127.0.0.1:{port}", bot
    finally:
        if child.process.returncode is None:
            child.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(child.process.wait(), 60)
        await child.reader
    assert code == 0, "".join(child.lines)


async def probes(base_url: str, bot: Obj) -> dict[str, int]:
    """Each of the rendered probes, asked once."""
    kinds = ("startup", "liveness", "readiness")
    paths = {kind: bot[f"{kind}Probe"]["httpGet"]["path"] for kind in kinds}
    async with httpx.AsyncClient(timeout=5) as http:
        return {kind: (await http.get(base_url + path)).status_code for kind, path in paths.items()}


ALL_OK = {"startup": 200, "liveness": 200, "readiness": 200}


async def test_the_rendered_http_container_answers_its_probes_and_slack(
    base: list[Obj], tmp_path: Path
) -> None:
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        rendered_container(
            base, tmp_path, SLACK_API_URL=slack.url, OPENAI_BASE_URL=llm.base_url
        ) as (child, url, bot),
    ):
        await child.wait_line("OpsGate listening")
        assert await probes(url, bot) == ALL_OK
        async with httpx.AsyncClient(timeout=5) as http:
            unsigned = await http.post(f"{url}/slack/events", content=b"{}")
        assert unsigned.status_code == 401  # HTTP mode: Slack's endpoint is there


async def test_the_rendered_socket_mode_container_connects_and_answers_its_probes(
    socket_mode: list[Obj], tmp_path: Path
) -> None:
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        SocketModeStandIn(slack) as sock,
        rendered_container(
            socket_mode, tmp_path, SLACK_API_URL=slack.url, OPENAI_BASE_URL=llm.base_url
        ) as (child, url, bot),
    ):
        await child.wait_line("connected to Slack (Socket Mode)")
        await sock.wait_connected()
        assert await probes(url, bot) == ALL_OK
        async with httpx.AsyncClient(timeout=5) as http:
            assert (await http.post(f"{url}/slack/events")).status_code in (404, 405)

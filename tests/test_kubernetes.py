"""contrib/: the container image recipe and the Kubernetes manifests, checked statically.

There is no cluster and no container engine here: the manifests are validated against the Kubernetes
API's own schemas (kubernetes-validate ships them, so this runs offline), memsync's config loader reads
the ConfigMap's memsync.toml, and the pieces are checked against one another (paths, ports, names, the
shard count and the image's user). The probes' command runs against a real daemon started with the
ConfigMap's settings and a pod's environment.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from memsync.api import open_client
from memsync.config import Config, Shard, load_config, parse_config
from memsync.engine.shards import POD_INDEX_ENV, SHARD_ENV, SHARDS_ENV, owner, statefulset_shard
from memsync.errors import ConfigError
from memsync.rules import Dialect
from tests.daemon.test_cli import TOKEN_ENV, DaemonProcess
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
CONTRIB = ROOT / "contrib"
MANIFESTS = CONTRIB / "kubernetes"
DOCKERFILE = CONTRIB / "Dockerfile"
HEALTHCHECK = CONTRIB / "healthcheck.py"
# 1.28 is the first release that labels StatefulSet pods with apps.kubernetes.io/pod-index.
K8S_VERSIONS = ["1.28.0", kubernetes_validate.utils.latest_version()]
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")


# --- reading contrib/ ---------------------------------------------------------------------------------


def _documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                found.append((path.name, document))
    return found


def _objects() -> list[tuple[str, dict[str, Any]]]:
    return [(name, doc) for name, doc in _documents() if not doc["apiVersion"].startswith("kustomize.")]


def _one(kind: str) -> dict[str, Any]:
    (found,) = [doc for _, doc in _objects() if doc["kind"] == kind]
    return found


def _container() -> dict[str, Any]:
    (container,) = _one("StatefulSet")["spec"]["template"]["spec"]["containers"]
    return container


def _env() -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in _container().get("env", [])}


def _mounts() -> dict[str, str]:
    return {mount["name"]: mount["mountPath"] for mount in _container()["volumeMounts"]}


def _config_map_config(tmp_path: Path) -> Config:
    """The ConfigMap's memsync.toml, read by memsync's own loader at the path the pod reads it from."""
    config_map = _one("ConfigMap")
    file = tmp_path / "memsync.toml"
    file.write_text(config_map["data"]["memsync.toml"])
    return load_config(file)


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of contrib/Dockerfile, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, rest = (pending + stripped).partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def _instruction(keyword: str) -> list[str]:
    return [rest for key, rest in _dockerfile() if key == keyword]


# --- the manifests are Kubernetes objects -------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_manifest_is_a_valid_kubernetes_object(version: str) -> None:
    objects = _objects()
    assert {doc["kind"] for _, doc in objects} == {"ConfigMap", "Secret", "Service", "StatefulSet"}
    for name, document in objects:
        # strict: an unknown or misspelt field is an error, as `kubectl apply --validate=strict` has it.
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(part) for part in exc.path)
            pytest.fail(
                f"{name}: {document['kind']} is not valid for Kubernetes {version}: {where}: {exc.message}"
            )
        assert DNS_LABEL.match(document["metadata"]["name"]), name


def test_the_validation_catches_a_misspelt_field() -> None:
    broken = _one("StatefulSet")
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(broken, K8S_VERSIONS[0], strict=True)


def test_the_kustomization_applies_every_manifest_but_the_example_secret() -> None:
    (kustomization,) = [doc for _, doc in _documents() if doc["kind"] == "Kustomization"]
    listed = set(kustomization["resources"])
    files = {path.name for path in MANIFESTS.glob("*.yaml")}
    assert listed == files - {"kustomization.yaml", "secret.example.yaml"}


def test_the_service_is_the_statefulsets_headless_service() -> None:
    statefulset, service = _one("StatefulSet"), _one("Service")
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    selector = statefulset["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    ports = {port["name"] for port in _container()["ports"]}
    assert {port["targetPort"] for port in service["spec"]["ports"]} <= ports


# --- the manifests agree with memsync's config and with one another -----------------------------------


def test_the_config_map_is_a_valid_memsync_config_at_the_path_the_pod_reads(tmp_path: Path) -> None:
    config = _config_map_config(tmp_path)
    spec = _one("StatefulSet")["spec"]
    volumes = {volume["name"]: volume for volume in spec["template"]["spec"]["volumes"]}
    config_file = PurePosixPath(_env()["MEMSYNC_CONFIG"]["value"])
    (volume_name,) = [n for n, v in volumes.items() if "configMap" in v]
    assert volumes[volume_name]["configMap"]["name"] == _one("ConfigMap")["metadata"]["name"]
    assert config_file == PurePosixPath(_mounts()[volume_name]) / "memsync.toml"
    # The image points MEMSYNC_CONFIG at the same file, so `kubectl exec ... memsync status` finds it.
    image_env = " ".join(_instruction("ENV"))
    assert f"MEMSYNC_CONFIG={config_file}" in image_env
    # The pods share this file: a [fleet] shard in it would give every pod the same stores.
    assert config.fleet.shard is None


def test_the_mirror_root_is_on_the_pods_own_volume(tmp_path: Path) -> None:
    config = _config_map_config(tmp_path)
    spec = _one("StatefulSet")["spec"]
    claims = {claim["metadata"]["name"]: claim for claim in spec["volumeClaimTemplates"]}
    assert "data" in claims and claims["data"]["spec"]["accessModes"] == ["ReadWriteOnce"]
    data_mount = PurePosixPath(_mounts()["data"])
    root = PurePosixPath(config.mirror.root)
    assert root.is_absolute() and data_mount in root.parents
    # The image owns (and declares) the same folder, so a volume mounted there starts writable.
    assert any(str(data_mount) in rest for rest in _instruction("VOLUME"))


def test_the_token_comes_from_the_secret(tmp_path: Path) -> None:
    config = _config_map_config(tmp_path)
    secret = _one("Secret")
    if config.api.token_env is not None:
        reference = _env()[config.api.token_env]["valueFrom"]["secretKeyRef"]
        assert reference["name"] == secret["metadata"]["name"]
        assert reference["key"] in secret.get("stringData", {}) | secret.get("data", {})
    else:
        # A token file must lie on a Secret volume (and be private: memsync refuses a readable one).
        assert config.api.token_file is not None
        volumes = _one("StatefulSet")["spec"]["template"]["spec"]["volumes"]
        secret_volumes = [v["name"] for v in volumes if "secret" in v]
        assert any(
            PurePosixPath(_mounts()[name]) in PurePosixPath(config.api.token_file).parents
            for name in secret_volumes
        )


def test_probes_and_prometheus_use_the_daemons_http_endpoint(tmp_path: Path) -> None:
    config = _config_map_config(tmp_path)
    assert config.daemon.http.listen is not None and config.daemon.http.expose
    host, _, port = config.daemon.http.listen.rpartition(":")
    # The kubelet and Prometheus reach the pod on its own address, not on its loopback.
    assert host == "0.0.0.0"
    container = _container()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == int(port)
    readiness = container["readinessProbe"]["httpGet"]
    assert readiness["path"] == "/healthz" and ports[readiness["port"]] == int(port)
    liveness = container["livenessProbe"]["exec"]["command"]
    assert liveness[0] == "memsync-healthcheck" and "--alive" in liveness
    assert f"http://127.0.0.1:{port}/healthz" in liveness
    annotations = _one("StatefulSet")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == port
    assert annotations["prometheus.io/path"] == "/metrics"
    assert str(port) in " ".join(_instruction("EXPOSE"))


def test_the_grace_period_outlasts_the_daemons_shutdown_deadline(tmp_path: Path) -> None:
    config = _config_map_config(tmp_path)
    pod = _one("StatefulSet")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > config.daemon.shutdown_deadline


def test_the_shard_count_is_the_replica_count_and_every_pod_gets_its_own_shard() -> None:
    statefulset = _one("StatefulSet")
    replicas = statefulset["spec"]["replicas"]
    env = _env()
    assert int(env[SHARDS_ENV]["value"]) == replicas
    assert SHARD_ENV not in env  # it would override the derivation and give every pod one shard
    field = env[POD_INDEX_ENV]["valueFrom"]["fieldRef"]["fieldPath"]
    assert field == "metadata.labels['apps.kubernetes.io/pod-index']"
    name = statefulset["metadata"]["name"]
    for ordinal in range(replicas):
        # From the pod-index label, and from the host name where the cluster has no such label.
        from_label = statefulset_shard(
            {SHARDS_ENV: env[SHARDS_ENV]["value"], POD_INDEX_ENV: str(ordinal)}, "x"
        )
        from_name = statefulset_shard(
            {SHARDS_ENV: env[SHARDS_ENV]["value"], POD_INDEX_ENV: ""}, f"{name}-{ordinal}"
        )
        assert from_label is not None and from_label[0] == Shard(ordinal, replicas)
        assert from_name is not None and from_name[0] == Shard(ordinal, replicas)


def test_the_pods_run_the_images_entry_point_as_its_unprivileged_user() -> None:
    pod = _one("StatefulSet")["spec"]["template"]["spec"]
    container = _container()
    # No command or args: the image's ENTRYPOINT, `memsync daemon`, runs.
    assert "command" not in container and "args" not in container
    (user,) = _instruction("USER")
    uid = user.split(":")[0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert str(pod["securityContext"]["runAsUser"]) == uid
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["automountServiceAccountToken"] is False


# --- the image recipe ------------------------------------------------------------------------------------


def test_the_image_is_debian_slim_python_3_11_with_git_and_a_non_root_user() -> None:
    (base,) = _instruction("FROM")
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", base), base
    installs = [rest for rest in _instruction("RUN") if "apt-get install" in rest]
    assert installs and "git" in shlex.split(installs[0].split("apt-get install", 1)[1])
    (user,) = _instruction("USER")
    uid = user.split(":")[0]
    # Numeric, so that Kubernetes can check runAsNonRoot; and not root.
    assert uid.isdigit() and int(uid) != 0
    assert any(f"--uid {uid}" in rest for rest in _instruction("RUN"))


def test_the_image_installs_memsync_from_the_source_tree_and_runs_the_daemon() -> None:
    copies = [shlex.split(rest)[:-1] for rest in _instruction("COPY")]
    sources = [source for sources in copies for source in sources]
    assert "src" in sources and "pyproject.toml" in sources
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    ignore = (CONTRIB / "Dockerfile.dockerignore").read_text().split()
    for source in sources:
        assert f"!{source}" in ignore or f"!{source}/" in ignore, f"the .dockerignore drops {source}"
    assert any(re.search(r"pip install .*-c constraints\.txt \.(\s|$)", rest) for rest in _instruction("RUN"))
    (entrypoint,) = _instruction("ENTRYPOINT")
    # Under tini, a minimal init that reaps orphaned git processes as PID 1 (docs/kubernetes.md).
    assert json.loads(entrypoint) == ["/usr/bin/tini", "--", "memsync", "daemon"]
    assert any(re.search(r"apt-get install .*\btini\b", rest) for rest in _instruction("RUN"))
    (healthcheck,) = _instruction("HEALTHCHECK")
    assert json.loads(healthcheck.split("CMD", 1)[1]) == ["memsync-healthcheck"]
    assert any("/usr/local/bin/memsync-healthcheck" in rest for rest in _instruction("COPY"))


# --- the health check -------------------------------------------------------------------------------------


class _Answer(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        body = json.dumps({"status": "ok" if self.status == 200 else "paused"}).encode()
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def healthz() -> Iterator[tuple[str, type[_Answer]]]:
    handler = type("Answer", (_Answer,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/healthz", handler
    server.shutdown()
    server.server_close()


def _healthcheck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK), *args], capture_output=True, text=True, timeout=30
    )


@pytest.mark.e2e
def test_the_health_check_tells_ready_from_alive(healthz: tuple[str, type[_Answer]]) -> None:
    url, handler = healthz
    assert _healthcheck("--url", url).returncode == 0
    assert _healthcheck("--url", url, "--alive").returncode == 0
    handler.status = 503
    paused = _healthcheck("--url", url)
    assert paused.returncode == 1 and "answered 503" in paused.stderr and "paused" in paused.stderr
    assert _healthcheck("--url", url, "--alive").returncode == 0
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/healthz"
    for extra in ((), ("--alive",)):
        gone = _healthcheck("--url", closed, *extra)
        assert gone.returncode == 1 and "no answer" in gone.stderr


def test_daemon_http_listen_leaves_loopback_only_with_expose() -> None:
    data: dict[str, Any] = {
        "api": {"dialect": "forward", "base_url": "http://127.0.0.1:1", "token_env": "T"},
        "mirror": {"root": "/tmp/m"},
    }
    with pytest.raises(
        ConfigError, match=r"daemon\.http\.listen: '0\.0\.0\.0:9465' is not a loopback.*expose"
    ):
        parse_config({**data, "daemon": {"http": {"listen": "0.0.0.0:9465"}}})
    config = parse_config({**data, "daemon": {"http": {"listen": "0.0.0.0:9465", "expose": True}}})
    assert config.daemon.http.listen == "0.0.0.0:9465"
    with pytest.raises(ConfigError, match=r"is not host:port"):
        parse_config({**data, "daemon": {"http": {"listen": "0.0.0.0", "expose": True}}})


@pytest.mark.e2e
def test_a_pod_of_the_statefulset_serves_its_shard_and_answers_the_probes(
    tmp_path: Path, server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(f"k8s-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
        client.create_memory(store.id, "notes/a.md", "one\n")
    # The ConfigMap's memsync.toml, pointed at this machine: the test server, a temporary mirror root,
    # a loopback port of its own, and this one store.
    text = _one("ConfigMap")["data"]["memsync.toml"]
    replacements = {
        r'base_url = ".*"': f'base_url = "{server.base_url}"',
        r'token_env = ".*"': f'token_env = "{TOKEN_ENV}"',
        r'root = ".*"': f'root = "{tmp_path / "mirrors"}"',
        r'listen = ".*"': 'listen = "127.0.0.1:0"',
        r"include = \[.*\]": f'include = ["{store.id}"]',
    }
    for pattern, replacement in replacements.items():
        text, count = re.subn(pattern, replacement, text)
        assert count == 1, pattern
    config = tmp_path / "memsync.toml"
    config.write_text(text)
    # The pod's environment as the StatefulSet sets it, for the pod whose shard owns the store.
    replicas = _one("StatefulSet")["spec"]["replicas"]
    monkeypatch.setenv(SHARDS_ENV, _env()[SHARDS_ENV]["value"])
    monkeypatch.setenv(POD_INDEX_ENV, str(owner(store.id, replicas)))
    monkeypatch.delenv(SHARD_ENV, raising=False)
    daemon = DaemonProcess.start(config, server.token)
    try:
        serving = wait_for(lambda: daemon.logged("serving /healthz"), what="the HTTP endpoint")
        address = re.search(r"http://([0-9.:]+)", serving)
        assert address is not None
        url = f"http://{address.group(1)}/healthz"
        assert _healthcheck("--url", url, "--alive").returncode == 0
        # Ready once its store's first cycle succeeded: the pod selected the store of its shard.
        wait_for(lambda: _healthcheck("--url", url).returncode == 0, timeout=60, what="readiness")
        assert (tmp_path / "mirrors" / store.id / "notes" / "a.md").read_text() == "one\n"
    finally:
        assert daemon.stop() == 0, daemon.log()

"""Deploy files, validated offline (no Docker engine here): compose config, Kubernetes
schemas (strict), the PrometheusRule's rules through promtool, mounts that exist."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@pytest.mark.skipif(shutil.which("docker-compose") is None,
                    reason="Debian docker-compose not installed")
def test_compose_file_is_valid():
    done = subprocess.run(["docker-compose", "-f", "compose.yml", "config", "-q"], cwd=DEPLOY,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What deploy/make-secrets.sh makes (compose mounts ./secrets; it is never committed)."""
    out = tmp_path_factory.mktemp("deploy") / "secrets"
    subprocess.run([str(DEPLOY / "make-secrets.sh"), str(out)], check=True,
                   capture_output=True)
    return out


def test_compose_mounts_and_builds_exist(secrets):
    compose = yaml.safe_load((DEPLOY / "compose.yml").read_text())
    services = compose["services"]
    assert {"kafka", "ragmon-worker-1", "ragmon-worker-2", "prometheus", "alertmanager",
            "grafana"} <= set(services)
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./secrets"):  # made by make-secrets.sh
                assert (secrets / source.removeprefix("./secrets").lstrip("/")).exists(), source
            else:
                assert (DEPLOY / source).exists(), source
    assert (DEPLOY / ".." / services["ragmon-worker-1"]["build"]["dockerfile"]).exists()
    assert "KAFKA_PROCESS_ROLES" in services["kafka"]["environment"]  # KRaft, no ZooKeeper


@pytest.mark.skipif(shutil.which("kubernetes-validate") is None,
                    reason="kubernetes-validate not installed")
def test_kubernetes_manifests_validate_strictly():
    files = sorted(str(p) for p in (DEPLOY / "k8s").glob("*.yaml"))
    done = subprocess.run(["kubernetes-validate", "--strict", *files], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    for kind in ("configmap/ragmon-settings", "deployment/ragmon-worker",
                 "service/ragmon-worker"):
        assert f"passed for resource {kind}" in done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_prometheus_rule_content_passes_promtool(tmp_path):
    rule = yaml.safe_load((DEPLOY / "k8s" / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_service_monitor_scrapes_the_worker_service_port():
    docs = list(yaml.safe_load_all((DEPLOY / "k8s" / "worker.yaml").read_text()))
    service = next(d for d in docs if d["kind"] == "Service")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    monitor = yaml.safe_load((DEPLOY / "k8s" / "servicemonitor.yaml").read_text())
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"] and container["livenessProbe"] and container["resources"]


def test_compose_and_kubernetes_carry_the_same_worker_settings():
    import tomllib

    from monitor.settings import load

    compose = yaml.safe_load((DEPLOY / "compose.yml").read_text())["services"]
    env = compose["ragmon-worker-1"]["environment"]
    from_compose = {k.removeprefix("RAGMON_").lower(): str(v) for k, v in env.items()}
    docs = list(yaml.safe_load_all((DEPLOY / "k8s" / "worker.yaml").read_text()))
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["ragmon.toml"]
    from_k8s = {k: str(v) for k, v in tomllib.loads(config).items()}
    assert from_compose == from_k8s
    settings = load(**tomllib.loads(config))  # both are valid settings
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= settings.shutdown_seconds + 5  # Kubernetes must not kill a clean stop
    assert int(compose["ragmon-worker-1"]["stop_grace_period"].rstrip("s")) == grace


def test_prometheus_and_the_service_monitor_scrape_as_the_docs_recommend():
    """15 s scrapes with a 10 s timeout (docs/operating.md; issue #24), both set-ups."""
    prometheus = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    job = next(j for j in prometheus["scrape_configs"] if j["job_name"] == "ragmon")
    monitor = yaml.safe_load((DEPLOY / "k8s" / "servicemonitor.yaml").read_text())
    [endpoint] = monitor["spec"]["endpoints"]
    assert (job["scrape_interval"], job["scrape_timeout"]) == ("15s", "10s")
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("15s", "10s")
    page = (DEPLOY.parent / "docs" / "operating.md").read_text()
    assert "scrape every 15 s with a 10 s timeout" in page


def test_make_secrets_gives_a_web_config_the_worker_loads_and_a_password_it_takes(secrets):
    import bcrypt

    from monitor.export.webconfig import load

    config = load(secrets / "web.yml")
    password = (secrets / "scrape-password").read_text().strip()
    assert config.context is not None and config.probes_without_auth
    assert bcrypt.checkpw(password.encode(), config.users["prometheus"])
    assert oct((secrets / "ca.key").stat().st_mode)[-3:] == "600"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_prometheus_config_scrapes_over_tls_with_basic_auth_and_passes_promtool(
        tmp_path, secrets):
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "ragmon")
    assert job["scheme"] == "https"
    assert job["tls_config"]["ca_file"] == "/etc/prometheus/ragmon/ca.crt"
    assert job["basic_auth"] == {"username": "prometheus",
                                 "password_file": "/etc/prometheus/ragmon/scrape-password"}
    # The container's paths, pointed at files here, as compose mounts them.
    text = (DEPLOY / "prometheus.yml").read_text().replace(
        "/etc/prometheus/ragmon/", f"{secrets}/").replace(
        "/etc/prometheus/ragmon-rules.yml", str(DEPLOY.parent / "alerts" / "ragmon-rules.yml"))
    (tmp_path / "prometheus.yml").write_text(text)
    done = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    monitor = yaml.safe_load((DEPLOY / "k8s" / "servicemonitor.yaml").read_text())
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"]["ca"]["secret"]
    assert set(endpoint["basicAuth"]) == {"username", "password"}


def test_the_worker_runs_hardened_and_probes_health_and_readiness():
    docs = list(yaml.safe_load_all((DEPLOY / "k8s" / "worker.yaml").read_text()))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["limits"]["memory"] and container["resources"]["limits"]["cpu"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert all(probe["httpGet"]["scheme"] == "HTTPS"
               for probe in (container["readinessProbe"], container["livenessProbe"]))
    # Secrets arrive as files, never in the environment.
    assert not any("valueFrom" in env for env in container.get("env", []))
    secret_volumes = {v["name"] for v in pod["volumes"] if "secret" in v}
    assert {"web", "tls", "kafka"} <= secret_volumes
    mounted = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert secret_volumes <= set(mounted)
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    [rule] = policy["spec"]["ingress"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert rule["from"][0]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "prometheus"}
    compose = yaml.safe_load((DEPLOY / "compose.yml").read_text())["services"]
    worker = compose["ragmon-worker-1"]
    assert worker["read_only"] is True and worker["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in worker["security_opt"]
    assert "/readyz" in " ".join(worker["healthcheck"]["test"])
    assert "USER nobody" in (DEPLOY / "Dockerfile").read_text()

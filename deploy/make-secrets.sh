#!/bin/sh
# The secrets of the compose set-up (and an example for Kubernetes), made here and never
# committed: a CA, the workers' server certificate, a scrape password, and the metrics
# endpoint's web configuration (exporter-toolkit format: TLS + basic auth, the password
# as a bcrypt hash; probes answer without auth). Needs openssl and python3 with bcrypt
# (`pip install bcrypt`, or ragmon's own environment).
#
#   deploy/make-secrets.sh [FOLDER]     # default: deploy/secrets (git-ignored)
set -eu
out="${1:-$(dirname "$0")/secrets}"
mkdir -p "$out"
cd "$out"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 365 \
    -subj "/CN=ragmon metrics CA" -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=ragmon-worker" -keyout server.key -out server.csr 2>/dev/null
printf 'subjectAltName=DNS:ragmon-worker-1,DNS:ragmon-worker-2,DNS:ragmon-worker,DNS:localhost,IP:127.0.0.1\n' > san.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
    -extfile san.ext -out server.crt 2>/dev/null
rm -f server.csr san.ext ca.srl
# Compose bind-mounts this folder read-only into containers running as `nobody`, which
# must read the server key and the password: readable here, so keep the folder on a
# machine only you use (Kubernetes mounts them from Secrets instead, deploy/k8s). The
# CA key signs only: nothing mounts a use for it.
chmod 644 server.key
chmod 600 ca.key

python3 - <<'PY'
import os, secrets, bcrypt
os.umask(0o022)
password = secrets.token_urlsafe(24)
open("scrape-password", "w").write(password + "\n")
hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(10)).decode()
open("web.yml", "w").write(f"""# The metrics endpoint's web configuration (ragmon worker --web-config-file).
tls_server_config:
  cert_file: server.crt
  key_file: server.key
  min_version: TLS12
basic_auth_users:
  prometheus: '{hashed}'
# ragmon's own key: /healthz and /readyz answer probes without the password.
health_probes_without_auth: true
""")
PY
echo "ragmon: secrets in $out (web.yml, server.crt/.key, ca.crt, scrape-password)" >&2

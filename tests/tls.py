"""Test certificates made with the openssl command: a CA, a server certificate for
127.0.0.1, client certificates (one per SAN asked for), and one from an unrelated CA; and
bcrypt hashes for web configuration files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import bcrypt

__all__ = ["hashed", "make_pki"]


def hashed(password: str, cost: int = 10) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()


def make_pki(folder: Path, clients: tuple[str, ...] = ("prometheus",)) -> Path:
    """ca.pem; server.crt/.key (IP:127.0.0.1, DNS:localhost); client-<name>.crt/.key per
    name (DNS:<name>); stranger.crt/.key signed by another CA. Returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    def signed(name: str, san: str, ca: str = "ca") -> None:
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr")
        (folder / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey",
                f"{ca}.key", "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
                "-out", f"{name}.crt")

    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-days", "2", "-subj", f"/CN=ragmon test {ca}", "-keyout",
                f"{ca}.key", "-out", f"{ca}.pem")
    signed("server", "IP:127.0.0.1,DNS:localhost")
    for name in clients:
        signed(f"client-{name}", f"DNS:{name}")
    signed("stranger", "DNS:prometheus", ca="other-ca")
    return folder

"""Kafka connection options from the settings, one source for every client ragmon runs.

kafka-python (`client.py`, `provision.py`), aiokafka (`topics.py`) and Faust (`app.py`)
take the same bootstrap servers, security protocol, SASL mechanism and credentials, and
one `ssl.SSLContext` built here (CA file, optional client certificate and key for mutual
TLS), so a setting can never reach one client and miss another. No client library is
imported here: the options are plain values.
"""

from __future__ import annotations

import ssl
from typing import Any

from monitor.settings import Settings

__all__ = ["ConnectionProblem", "TopicProblem", "aiokafka_options", "kafka_python_options",
           "ssl_context"]


class ConnectionProblem(Exception):
    """The broker cannot be used: the message is one line naming the broker and the cause."""


class TopicProblem(Exception):
    """A topic whose layout breaks ragmon's guarantees; the message says which topic, what
    is wrong and how to fix it, in one line (monitor/worker/provision.py)."""


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of SSL and SASL_SSL connections (None for plaintext ones)."""
    if settings.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    try:
        context = ssl.create_default_context(cafile=settings.ssl_cafile)
        if settings.ssl_certfile and settings.ssl_keyfile:
            password = settings.ssl_password.get_secret_value() if settings.ssl_password \
                else None
            context.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile, password)
    except (OSError, ssl.SSLError) as exc:
        files = ", ".join(f for f in (settings.ssl_cafile, settings.ssl_certfile,
                                      settings.ssl_keyfile) if f)
        raise ConnectionProblem(f"cannot load TLS files ({files}): {exc}") from None
    return context


def _sasl(settings: Settings) -> dict[str, Any]:
    if not settings.security_protocol.startswith("SASL"):
        return {}
    password = settings.sasl_password.get_secret_value() if settings.sasl_password else None
    return {"sasl_mechanism": settings.sasl_mechanism,
            "sasl_plain_username": settings.sasl_username,
            "sasl_plain_password": password}


def kafka_python_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of kafka-python's producer, consumer and admin client."""
    return {"bootstrap_servers": settings.bootstrap_servers.split(","),
            "security_protocol": settings.security_protocol,
            "ssl_context": ssl_context(settings), **_sasl(settings)}


def aiokafka_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of aiokafka's consumer and producer (the same names)."""
    return kafka_python_options(settings)

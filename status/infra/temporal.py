"""Connecting to Temporal from settings, the way the plugin's users connect their workers."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client
from temporalio.service import TLSConfig

from status.settings import Settings


def tls_config(settings: Settings) -> TLSConfig | bool:
    """mTLS or server-verified TLS when configured; an API key (Temporal Cloud) implies TLS."""
    files = (settings.temporal_tls_ca_file, settings.temporal_tls_cert_file, settings.temporal_tls_key_file)
    if any(files) or settings.temporal_tls_server_name:
        ca, cert, key = (Path(f).read_bytes() if f else None for f in files)
        return TLSConfig(
            server_root_ca_cert=ca, client_cert=cert, client_private_key=key, domain=settings.temporal_tls_server_name
        )
    return settings.temporal_tls or bool(settings.temporal_api_key)


async def connect(settings: Settings, namespace: str | None = None) -> Client:
    return await Client.connect(
        settings.temporal_address,
        namespace=namespace or settings.temporal_namespace,
        tls=tls_config(settings),
        api_key=settings.temporal_api_key,
    )

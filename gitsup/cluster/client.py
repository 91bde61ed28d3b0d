"""A connection to the cluster's Temporal frontend (TLS / mTLS as configured)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gitsup.cluster.settings import ClusterSettings
from gitsup.errors import Exit, GitsupError

if TYPE_CHECKING:
    from temporalio.client import Client


async def connect(settings: ClusterSettings, *, identity: str | None = None) -> Client:
    from temporalio.client import Client, TLSConfig

    tls: TLSConfig | bool = False
    if settings.tls:
        tls = TLSConfig(
            server_root_ca_cert=settings.tls_ca.read_bytes() if settings.tls_ca else None,
            client_cert=settings.tls_cert.read_bytes() if settings.tls_cert else None,
            client_private_key=settings.tls_key.read_bytes() if settings.tls_key else None,
            domain=settings.tls_server_name,
        )
    try:
        if identity is not None:
            return await Client.connect(
                settings.address, namespace=settings.namespace, tls=tls, identity=identity
            )
        return await Client.connect(settings.address, namespace=settings.namespace, tls=tls)
    except RuntimeError as exc:  # the SDK's core reports a failed connection this way
        raise GitsupError(
            f"cannot reach the cluster at {settings.address}: {exc}",
            hint="is it running? (`git sup cluster dev` runs one on this machine)",
            exit_code=Exit.INTERNAL,
        ) from None

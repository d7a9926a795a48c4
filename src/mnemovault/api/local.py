"""The local socket of ``mnemovault server``: the HTTP API over a unix socket, for this
machine's user that runs the server (the *local operator*), without an API key.

Who may use it (docs/server.md has the whole design):

1. the socket file is made mode 0600 by this user (bound under umask 0177, so there is no
   moment it is open to others; uvicorn's own ``uds=`` would chmod it 0666), in the data
   dir or a 0700 directory of this user's: another local user cannot connect;
2. every accepted connection's peer credentials (``SO_PEERCRED``: the kernel's record of
   the connecting process, not something the client says) are checked: a peer whose user
   id is not the server's is closed before a byte is read, whatever the file mode became;
3. only this listener marks a request as the local operator's (:data:`LOCAL_OPERATOR` in
   the ASGI scope, :class:`LocalOperator`); the same routes over TCP (``mnemovault serve``)
   still require an API key, and no header can set the mark.

A request acts for the tenant in its ``x-mnemovault-tenant`` header (``--tenant``), as the
owner, exactly as a local CLI command does; every write is governed and audited the same
way (the routes call the same :class:`~mnemovault.MemoryVault`).
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from contextlib import suppress
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from mnemovault.api.edge import LOCAL_OPERATOR
from mnemovault.errors import Unavailable

__all__ = ["LocalOperator", "bind_socket", "peer_check", "peer_uid"]

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class LocalOperator:
    """ASGI wrapper: every request through it is the local operator's (module docstring).
    Wrap the app only for the unix socket listener."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, LOCAL_OPERATOR: True}
        await self.app(scope, receive, send)


def peer_uid(sock: Any) -> int | None:
    """The user id of the process at the other end of a unix socket (``SO_PEERCRED``), or
    None where the platform does not say."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, opt, _UCRED.size)
    except OSError:
        return None
    return int(_UCRED.unpack(raw)[1])


def peer_check(base: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol ``base`` with the peer check: a connection from another user
    (or whose user cannot be told) is closed at once."""
    me = os.geteuid()

    class PeerChecked(base):  # type: ignore[misc,valid-type]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # (its state, so the close is orderly)
            sock = transport.get_extra_info("socket")
            if sock is None or peer_uid(sock) != me:
                transport.close()  # before a byte is read: data comes in a later callback

    PeerChecked.__name__ = f"PeerChecked{base.__name__}"
    return PeerChecked


def bind_socket(path: Path) -> socket.socket:
    """A listening unix socket at ``path``, mode 0600 from the start. A stale socket file
    (nobody listens) is replaced; a directory made for it is 0700 and must be this user's.

    Raises:
        Unavailable: another server listens there, or the directory is another user's or
            open to others.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.parent.stat()
    if path.parent.name.startswith("mnemovault-") and (st.st_uid != os.geteuid()
                                                       or st.st_mode & 0o077):
        raise Unavailable(f"server: {path.parent} must be a directory of this user's with "
                          "mode 0700 (it holds the server's socket)")
    if path.exists():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale: its server is gone
        else:
            raise Unavailable(f"server: a server already listens on {path}; "
                              "`mnemovault server status` shows it")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(128)
    sock.setblocking(False)
    return sock


def remove_socket(path: Path) -> None:
    with suppress(OSError):
        path.unlink()

"""The MCP server (Model Context Protocol, the official ``mcp`` SDK, version 2).

One :class:`~mcp.server.mcpserver.MCPServer` with the memory tools and the rule prompt
(:mod:`.server`), served two ways:

* over stdio by ``mnemovault mcp`` (:mod:`mnemovault.cli.mcp`): the caller is the API key
  in ``MNEMOVAULT_API_KEY`` (or, with ``--local``, the local operator);
* over streamable HTTP at ``/mcp`` of the HTTP API (:mod:`.http`): every request carries
  ``Authorization: Bearer mvk_…`` and is authenticated like any other API request.

Either way each tool resolves the caller's :class:`~mnemovault.auth.Principal` and calls
one :class:`~mnemovault.vault.MemoryVault` method with it, so a key has the same
permissions and the same scope and subject limits on MCP as on the HTTP API.

The SDK is imported by its absolute name (``import mcp``, ``from mcp.server…``): inside
this package that is the SDK, never ``mnemovault.mcp`` (Python 3 has no implicit relative
imports).
"""

from __future__ import annotations

from mnemovault.mcp.http import http_router
from mnemovault.mcp.server import build_server

__all__ = ["build_server", "http_router"]

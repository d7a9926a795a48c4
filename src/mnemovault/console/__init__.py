"""The web console at ``/console`` (issue 25; SPEC section 13): server-rendered pages for the
people who oversee the memory (reviewers, privacy officers, auditors, owners).

* :mod:`.sessions`: an API key exchanged for a server-side session (in memory; why there).
* :mod:`.router`: the pages and their forms. Every action calls the same
  :class:`~mnemovault.vault.MemoryVault` method as the HTTP API; the console holds no rules
  of its own, so a key sees and does exactly what it may over HTTP.
* ``templates/`` (Jinja2, autoescaped) and ``static/`` (CSS and one small script, served
  from the package: no CDN, works offline; the Content-Security-Policy allows no inline
  script).

Mounted by :func:`mnemovault.api.create_app` unless ``MNEMOVAULT_CONSOLE=false``. See
``docs/console.md``.
"""

from mnemovault.console.router import console_router
from mnemovault.console.sessions import SessionStore

__all__ = ["SessionStore", "console_router"]

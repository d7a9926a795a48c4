"""Chat with governance (SPEC sections 4 and 5): in-band commands, fenced context, pluggable
models, streaming de-anonymisation, the exchange stored as an episode.

Use it through :meth:`mnemovault.MemoryVault.chat` / :meth:`~mnemovault.MemoryVault.
chat_stream`, or the HTTP endpoints ``POST /v1/chat`` and ``POST /v1/chat/stream``.
"""

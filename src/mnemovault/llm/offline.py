"""The built-in offline responder: answers from the retrieved records without a model.

It never paraphrases or invents: it says that it is quoting memory and quotes the records
that recall returned, best first, each with its date and type, or says that nothing stored
matches. It streams word by word, like a model would, so the streaming path is exercised
with no network.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from mnemovault.llm.base import ChatPrompt

_TOKEN = re.compile(r"\s*\S+|\s+$")
NO_MATCH = "Quoting memory: nothing stored in this scope matches your message."
HEADER = ("Quoting memory (no language model is configured, so these are the stored records "
          "that best match your message, quoted as they are):")


class OfflineResponder:
    """The default provider (``MNEMOVAULT_CHAT_PROVIDER=offline``)."""

    name = "offline"

    def answer(self, prompt: ChatPrompt) -> str:
        """The whole answer at once (what :meth:`stream` yields, joined)."""
        if not prompt.records:
            return NO_MATCH
        lines = [HEADER]
        for n, r in enumerate(prompt.records, 1):
            text = " ".join(r.content.split())
            lines.append(f"{n}. [{r.date}, {r.type}] {text}")
        return "\n".join(lines)

    def stream(self, prompt: ChatPrompt) -> Iterator[str]:
        """The answer token by token (a token is a word with the whitespace before it)."""
        yield from _TOKEN.findall(self.answer(prompt))

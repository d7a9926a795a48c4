"""``python -m mnemovault.cli``: the same as the ``mnemovault`` console script."""

from mnemovault.cli import main

main()

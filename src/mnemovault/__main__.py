"""``python -m mnemovault``: the same as the ``mnemovault`` console script."""

from mnemovault.cli import main

main()

"""Assert that the database refused a statement, as the library reports it: a mnemovault
error kind whose ``__cause__`` is the driver's exception of the expected class."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from mnemovault.errors import MnemoError


@contextmanager
def refused_by_database(kind: type[BaseException]) -> Iterator[None]:
    with pytest.raises(MnemoError) as info:
        yield
    assert isinstance(info.value.__cause__, kind), repr(info.value.__cause__)

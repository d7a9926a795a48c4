"""The embedder interface."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # numpy is imported where vectors are made (not by commands that never embed)
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]
else:  # the name, for modules that import it at run time (their annotations are strings)
    Vectors = Any


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors of shape ``(len(texts), dimension)``.

    ``model`` names the model; it and ``dimension`` are recorded in the database, which then
    refuses any other embedder.
    """

    model: str

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: list[str]) -> Vectors: ...


def normalise(vectors: Vectors) -> Vectors:
    """Scale each row to unit L2 length (zero rows stay zero)."""
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (vectors / norms).astype(np.float32, copy=False)

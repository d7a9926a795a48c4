"""What every capability works with: the database, the embedder, the settings, the key
ring and the vault recipes, the detectors, the fusion weights and the chat provider.

:meth:`Runtime.open` starts it (the embedded PostgreSQL unless ``DATABASE_URL`` is set,
migrations, the embedder check, the key ring check, audit signing and its JSON Lines
mirror). The service facade (:class:`mnemovault.MemoryVault`) holds one and hands it to
the capability modules; nothing in here knows about principals or rules.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from mnemovault.audit.service import AuditService
from mnemovault.config import Settings
from mnemovault.embed import Embedder, make_embedder
from mnemovault.embed.view import ViewEmbedder
from mnemovault.errors import ConfigError
from mnemovault.llm import ChatProvider, make_provider
from mnemovault.pii.crypto import KeyRing
from mnemovault.pii.detect import Detector
from mnemovault.pii.keystore import open_key_store
from mnemovault.pii.sealing import Sealer
from mnemovault.pii.vault import PiiVault, embedding_view
from mnemovault.recall.ranking import FusionWeights
from mnemovault.store import pii as pii_store
from mnemovault.store.db import Database

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """The shared machinery of one open service. Fields may be replaced (a test double for
    ``llm``, other fusion ``weights`` in a benchmark).

    ``embedder`` always reads the database's *text view* (``text_view``: ``"kinds"``, each
    placeholder as its kind word, or the legacy ``"placeholders"``): whatever embedder is
    given or assigned later is wrapped in a :class:`~mnemovault.embed.view.ViewEmbedder`,
    the one choke point between stored text and the embedder. Without ``text_view`` it is
    the given embedder's (already wrapped) view, else the database's recorded one."""

    db: Database
    embedder: Embedder
    settings: Settings
    keyring: KeyRing
    text_view: str | None = None
    pii: PiiVault = field(init=False)
    sealer: Sealer = field(init=False)
    detectors: list[Detector] = field(init=False)
    weights: FusionWeights = field(init=False)
    audit: AuditService = field(init=False)
    _llm: ChatProvider | None = field(default=None, init=False, repr=False)

    def __setattr__(self, name: str, value: object) -> None:
        if name == "embedder" and self.__dict__.get("text_view") is not None:
            value = view_embedder(value, self.__dict__["text_view"])  # type: ignore[arg-type]
        object.__setattr__(self, name, value)

    def __post_init__(self) -> None:
        s = self.settings
        self.text_view = resolve_text_view(self.db, self.embedder, s, self.text_view)
        self.embedder = self.embedder  # through __setattr__: wrapped in the view
        self.pii = PiiVault(self.keyring)
        self.sealer = Sealer.of(open_key_store(self.keyring, s.key_store, s.data_dir))
        self.db.row_hook = self.sealer.row_hook
        self.detectors = default_detectors(s)
        self.audit = setup_audit(self.db, s)
        self.weights = FusionWeights(
            method=s.recall_fusion, rrf_k=s.recall_rrf_k, vector=s.recall_vector_weight,
            text=s.recall_text_weight, recency=s.recall_recency_weight,
            half_life_days=s.recall_recency_half_life_days, gate_low=s.recall_gate_low,
            gate_high=s.recall_gate_high)

    def close(self) -> None:
        """Close the database pool and the key store's connection."""
        self.db.close()
        self.sealer.store.close()

    @property
    def llm(self) -> ChatProvider:
        """The chat provider (``MNEMOVAULT_CHAT_PROVIDER``; the offline responder by
        default), made on first use."""
        if self._llm is None:
            self._llm = make_provider(self.settings)
        return self._llm

    @llm.setter
    def llm(self, provider: ChatProvider) -> None:
        self._llm = provider

    @classmethod
    def open(cls, settings: Settings, *, embedder: Embedder | None = None,
             migrate: bool = True) -> Runtime:
        """Connect (starting the embedded server if needed), migrate, check the embedder
        and the key ring.

        The embedder defaults to :func:`~mnemovault.embed.make_embedder`'s lazy one: its
        model and dimension are checked here, its model is loaded on the first ``embed()``
        (so opening for a command that never embeds does not import torch).

        Raises:
            ConfigError: the database was built with a different embedder, or holds data
                keys under a KEK version the key ring lacks.
            Unavailable: the database could not be started or migrated.
        """
        embedder = embedder or make_embedder(settings)
        db = Database.from_settings(settings)
        dim = embedder.dimension
        if migrate:
            db.ensure_schema(dim)
        view = db.check_embedder(embedder.model, dim, settings.embed_text_view)
        keyring = load_keyring(settings)
        check_keyring(db, keyring)
        db.open()
        if not settings.pii_pseudonymize:
            log.warning("PII_PSEUDONYMIZE=false: personal values are stored as written")
        rt = cls(db, embedder, settings, keyring, text_view=view)
        missing = sorted(set(rt.sealer.store.versions()) - set(keyring.keys))
        if missing:
            rt.sealer.store.close()
            db.close()
            raise ConfigError(
                f"kek: the key store {rt.sealer.store!r} holds content keys wrapped under KEK "
                f"version(s) {missing}, which {keyring.path or 'MNEMOVAULT_KEK'} does not "
                "have; restore the original key file (or set MNEMOVAULT_KEK_FILE to it)",
                field="kek")
        return rt


def view_embedder(embedder: Embedder, view: str) -> ViewEmbedder:
    """``embedder`` (unwrapped if it is a view already) reading the ``view`` of each text."""
    while isinstance(embedder, ViewEmbedder):
        embedder = embedder.inner
    return ViewEmbedder(embedder, view, embedding_view if view == "kinds" else None)


def resolve_text_view(db: Database, embedder: Embedder, settings: Settings,
                      given: str | None) -> str:
    """The text view: ``given``, else that of an embedder wrapped already (a runtime made
    from another's parts), else the database's (:meth:`Database.check_embedder`, which
    records ``"kinds"`` for a new one).

    Raises:
        ConfigError: ``MNEMOVAULT_EMBED_TEXT_VIEW`` names another view (field
            ``embed_text_view``).
    """
    view = given or (embedder.view if isinstance(embedder, ViewEmbedder) else None)
    if view is None:
        return db.check_embedder(embedder.model, embedder.dimension, settings.embed_text_view)
    if settings.embed_text_view is not None and settings.embed_text_view != view:
        raise ConfigError(
            f"embed_text_view: this database's vectors were made from the {view!r} view of "
            f"its texts, not {settings.embed_text_view!r}", field="embed_text_view")
    return view


def setup_audit(db: Database, settings: Settings) -> AuditService:
    """Checkpoint signing (key file outside the database) and the JSON Lines mirror."""
    from mnemovault.audit import log as audit_log
    from mnemovault.audit.mirror import JsonlMirror

    data_dir = Path(settings.data_dir).expanduser()
    audit_log.configure(audit_log.AuditConfig(
        key_path=settings.audit_signing_key or data_dir / "audit_signing.key",
        origin=settings.audit_origin, checkpoint_rows=settings.audit_checkpoint_rows,
        checkpoint_seconds=settings.audit_checkpoint_seconds))
    if settings.audit_jsonl and not db.after_commit:
        db.after_commit.append(
            JsonlMirror(db, settings.audit_jsonl_dir or data_dir / "audit").sync)
    return AuditService(db)


def check_keyring(db: Database, keyring: KeyRing) -> None:
    """Refuse a key ring that lacks a KEK version the database's wrapped keys use (a wrong
    or lost key file must not silently start a second, unreadable generation of keys)."""
    missing = sorted(pii_store.kek_versions_in_use(db.url) - set(keyring.keys))
    if missing:
        where = keyring.path or "MNEMOVAULT_KEK"
        if keyring.created and keyring.path is not None:
            keyring.path.unlink(missing_ok=True)  # the key file this start just made
        raise ConfigError(
            f"kek: the database holds data keys wrapped under KEK version(s) {missing}, "
            f"which {where} does not have; restore the original key file (or set "
            "MNEMOVAULT_KEK_FILE to it)", field="kek")


def load_keyring(settings: Settings) -> KeyRing:
    """The KEKs: ``MNEMOVAULT_KEK``, else the key file (default ``<data_dir>/kek.json``)."""
    path = settings.kek_file or (Path(settings.data_dir).expanduser() / "kek.json")
    return KeyRing.load(env_value=settings.kek, key_file=path)


def default_detectors(settings: Settings) -> list[Detector]:
    """The built-in detectors (no model needed): IBAN, card, email, IP, phone. Phone
    numbers without a country code are tried in ``phone_default_region``, then in each of
    ``phone_fallback_regions``."""
    from mnemovault.pii import detect

    return detect.default_detectors(settings.phone_default_region,
                                    fallback_regions=settings.phone_fallback_regions)


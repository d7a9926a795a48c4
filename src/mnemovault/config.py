"""Settings, read from environment variables (SPEC section 13) with these defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

import platformdirs
from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    """The user data directory that holds the embedded database (``~/.local/share/mnemovault``)."""
    return Path(platformdirs.user_data_dir("mnemovault", appauthor=False))


class Settings(BaseSettings):
    """All settings. Environment variables use the names in SPEC section 13 (no prefix for
    those), and ``MNEMOVAULT_`` for the rest."""

    model_config = SettingsConfigDict(env_prefix="MNEMOVAULT_", extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _empty_paths_are_unset(cls, data: Any) -> Any:
        """An empty (or blank) value of a path setting means unset, so its default applies:
        ``MNEMOVAULT_KEK_FILE=`` would otherwise be ``Path("")``, the working directory."""
        if not isinstance(data, dict):
            return data
        paths = {name for name, f in cls.model_fields.items()
                 if f.annotation is Path or Path in get_args(f.annotation)}
        return {k: v for k, v in data.items()
                if not (k in paths and isinstance(v, str) and not v.strip())}

    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    data_dir: Path = Field(default_factory=default_data_dir)
    app_role: str = "mnemovault_app"
    # the application's own login (row-level security applies to it): with DATABASE_URL,
    # MNEMOVAULT_APP_DATABASE_URL, else DATABASE_URL with user = app_role and password =
    # MNEMOVAULT_APP_PASSWORD (which `db upgrade` sets on the role); the embedded server
    # needs neither (trust authentication on its unix socket)
    app_database_url: str | None = None
    app_password: SecretStr | None = None
    pool_max_size: int = 8

    embedder: Literal["local", "openai"] = "local"
    embed_model: str | None = None
    embed_base_url: str = "https://api.openai.com/v1"
    embed_api_key: str | None = None
    embed_dimensions: int | None = None
    embed_batch_size: int = 64
    embed_threads: int = 1  # torch intra-op threads for the local embedder (0: torch default)

    tenant: str = "default"

    # recall tuning (defaults chosen by bench/locomo_recall, see README)
    recall_candidates: int = 100
    recall_fusion: Literal["convex", "rrf"] = "convex"
    recall_rrf_k: int = 5
    recall_vector_weight: float = 0.4
    recall_text_weight: float = 0.6
    recall_recency_weight: float = 0.05
    recall_recency_half_life_days: float = 30.0
    hnsw_ef_search: int = 100

    kek: str | None = None  # MNEMOVAULT_KEK: base64 of 32 bytes (else the key file)
    kek_file: Path | None = None  # default <data_dir>/kek.json, created 0600
    # numbers without a country code: tried in the default region, then each fallback
    # (the fallbacks are Presidio's default phone regions; bench/pii_detect.py measures them)
    phone_default_region: str | None = None
    phone_fallback_regions: list[str] = Field(
        default_factory=lambda: ["US", "GB", "DE", "FR", "IL", "IN", "CA", "BR"])

    # audit log: Ed25519 checkpoint signing key (default <data_dir>/audit_signing.key),
    # checkpoint cadence, and the JSON Lines mirror (default <data_dir>/audit/<tenant>.jsonl)
    audit_signing_key: Path | None = None
    audit_origin: str = "mnemovault/audit"
    audit_checkpoint_rows: int = 1000
    audit_checkpoint_seconds: float = 3600.0
    audit_jsonl: bool = True
    audit_jsonl_dir: Path | None = None

    pii_pseudonymize: bool = Field(default=True, validation_alias="PII_PSEUDONYMIZE")
    allow_semantic_forget: bool = Field(default=False, validation_alias="ALLOW_SEMANTIC_FORGET")

    # forget by query: how many recall candidates are considered; a candidate matches when
    # its cosine similarity is at least forget_min_similarity and within
    # forget_similarity_margin of the best one (records that use a vault value the query
    # names always match)
    forget_candidates: int = Field(default=10, ge=1, le=100)
    forget_min_similarity: float = Field(default=0.3, ge=-1.0, le=1.0)
    forget_similarity_margin: float = Field(default=0.2, ge=0.0, le=2.0)

    # retention (SPEC section 10): score = 2^(-idle_days / half_life) * (w_recency
    #   + w_access * min(1, ln(1 + access_count) / ln(1 + saturation))), idle since the last
    #   access (or creation); pinned memories are never archived nor deleted.
    # A memory idle for at least min_idle_days scoring below archive_below is archived;
    # with delete_unused_days set, unpinned memories idle that long are forgotten.
    retention_half_life_days: float = Field(default=30.0, gt=0)
    retention_recency_weight: float = Field(default=0.6, ge=0)
    retention_access_weight: float = Field(default=0.4, ge=0)
    retention_access_saturation: int = Field(default=10, ge=1)
    retention_archive_below: float = Field(default=0.15, ge=0)
    retention_min_idle_days: float = Field(default=14.0, ge=0)
    retention_delete_unused_days: float | None = Field(default=None, gt=0)
    retention_interval_hours: float = Field(default=0.0, ge=0)  # 0: no in-process schedule

    # chat (SPEC section 5): "offline" answers from the retrieved records with no model;
    # "openai" is any OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, llama.cpp, LiteLLM)
    chat_provider: Literal["offline", "openai"] = "offline"
    chat_model: str = "gpt-4o-mini"
    chat_base_url: str = "https://api.openai.com/v1"
    chat_api_key: str | None = None
    chat_timeout_seconds: float = Field(default=60.0, gt=0)
    chat_temperature: float = Field(default=0.2, ge=0, le=2)
    chat_max_tokens: int | None = Field(default=None, ge=1)
    chat_k: int = Field(default=5, ge=1, le=20)


def get_settings() -> Settings:
    return Settings()

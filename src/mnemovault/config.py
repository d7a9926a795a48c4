"""Settings, read from environment variables (SPEC section 13) with these defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    """The user data directory that holds the embedded database (``~/.local/share/mnemovault``)."""
    return Path(platformdirs.user_data_dir("mnemovault", appauthor=False))


class Settings(BaseSettings):
    """All settings. Environment variables use the names in SPEC section 13 (no prefix for
    those), and ``MNEMOVAULT_`` for the rest."""

    model_config = SettingsConfigDict(env_prefix="MNEMOVAULT_", extra="ignore")

    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    data_dir: Path = Field(default_factory=default_data_dir)
    app_role: str = "mnemovault_app"
    pool_max_size: int = 8

    embedder: Literal["local", "openai"] = "local"
    embed_model: str | None = None
    embed_base_url: str = "https://api.openai.com/v1"
    embed_api_key: str | None = None
    embed_dimensions: int | None = None
    embed_batch_size: int = 64

    tenant: str = "default"

    # recall tuning (defaults chosen by bench/locomo_recall, see README)
    recall_candidates: int = 100
    recall_rrf_k: int = 60
    recall_vector_weight: float = 1.0
    recall_text_weight: float = 0.5
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

    pii_pseudonymize: bool = Field(default=True, validation_alias="PII_PSEUDONYMIZE")
    allow_semantic_forget: bool = Field(default=False, validation_alias="ALLOW_SEMANTIC_FORGET")


def get_settings() -> Settings:
    return Settings()

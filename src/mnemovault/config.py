"""Settings, read from environment variables (SPEC section 13) with these defaults."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, get_args

import platformdirs
from pydantic import Field, SecretStr, field_validator, model_validator
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
    # the embedded server's shared_buffers: "auto" (a quarter of memory, 128 MB to 1 GB)
    # or a PostgreSQL size such as "512MB" (store/embedded.py: shared_buffers_for)
    embedded_shared_buffers: str = "auto"

    embedder: Literal["local", "openai"] = "local"
    embed_model: str | None = None
    embed_base_url: str = "https://api.openai.com/v1"
    embed_api_key: str | None = None
    embed_dimensions: int | None = None
    embed_batch_size: int = 64
    embed_threads: int = 1  # torch intra-op threads for the local embedder (0: torch default)
    # local embedder: model calls at once; concurrent requests beyond that are embedded
    # together in the next call (mnemovault.embed.coalesce)
    embed_concurrency: int = Field(default=1, ge=1, le=64)
    # what the embedder reads of a text holding placeholders: "kinds" (each placeholder as
    # its kind word; every new database) or "placeholders" (as stored; databases made
    # before the view was recorded). None: the database's recorded view. A value that
    # differs from the database's is refused (its vectors were made from the other view).
    embed_text_view: Literal["kinds", "placeholders"] | None = None

    tenant: str = "default"

    # recall tuning: defaults chosen with bench/recall_eval over all its sets (LoCoMo,
    # MADial-Bench, the preference set; results in bench/results/recall_eval.json)
    recall_candidates: int = 100  # per list; capped at 1000 (pgvector's ef_search limit)
    recall_fusion: Literal["gated", "convex", "rrf"] = "gated"
    recall_rrf_k: int = 5
    recall_vector_weight: float = 0.3
    recall_text_weight: float = 0.7
    recall_recency_weight: float = 0.05
    recall_recency_half_life_days: float = 30.0
    # the gated fusion's lexical gate: the text side's share rises from 0 at this fraction of
    # the query's IDF mass matched by the best lexical hit to full at the high one
    recall_gate_low: float = Field(default=0.05, ge=0.0, le=1.0)
    recall_gate_high: float = Field(default=0.2, ge=0.0, le=1.0)
    # conversation context: the best hits lend score to the turns just before and after
    # them in their conversation (same scope and provenance run_id; none without one),
    # within this gap (mnemovault.recall.ranking); False: the plain fusion
    recall_context: bool = True
    recall_context_gap_seconds: float = Field(default=1800.0, ge=0.0)
    # recall's second step (mnemovault.recall.multihop): the first step's best hits lend
    # the query their rarest terms and their embeddings, a second BM25 and dense query is
    # fused into the first ranking with this weight (times the lexical gate); off: one step.
    # Off by default: on held-out sets it loses session recall and the preference set
    # (bench/README.md, bench/results/multihop.json); hits/terms/weight chosen on conv-26
    recall_multihop: bool = False
    recall_multihop_hits: int = Field(default=3, ge=1, le=20)
    recall_multihop_terms: int = Field(default=4, ge=0, le=64)
    recall_multihop_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    # optional re-ranker: a local cross-encoder directory (never downloaded), and how many
    # fused hits it re-scores (mnemovault.recall.rerankers)
    recall_reranker: Path | None = None
    recall_rerank_depth: int = 30
    hnsw_ef_search: int = 100

    kek: str | None = None  # MNEMOVAULT_KEK: base64 of 32 bytes (else the key file)
    kek_file: Path | None = None  # default <data_dir>/kek.json, created 0600
    # content keys (issue 21; mnemovault.pii.keystore): where the per-subject and per-scope
    # keys that seal stored text live, outside the database: unset, a `keys` directory
    # beside the key file; a directory path; or postgresql://... (a separate small database
    # shared by several app servers, and by Citus). A backup of it kept past an erase
    # undoes the shred: short retention, or a KMS.
    key_store: str | None = None
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

    # erasure ledger (issues 10, 21; mnemovault.subjects.ledger): each erase, forget and
    # shred is recorded in the erasure_ledger table and, after commit, appended (chained,
    # signed) to a JSON Lines file outside the database and the data directory (default
    # <user state dir>/ledger/<database id>/<tenant>.jsonl) that a backup restore does not
    # roll back; every start re-erases what a restored database lacks from it
    ledger_file: bool = True
    ledger_dir: Path | None = None

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

    # the librarian (SPEC section 5, consolidation; mnemovault.librarian): merges
    # near-duplicate episodes (cosine of their stored embeddings >= merge_similarity and
    # token Jaccard >= merge_lexical) into one fact, distils topical groups of a subject's
    # episodes (cosine to the group's centroid >= topic_similarity, at most max_sources
    # each) into facts, with the chat model when one is configured and use_model, else
    # extractively. A fact ranks fact_boost above its sources until nothing has recalled
    # or woken it for fade_after_days: then faded_boost, and retention archives it like any
    # memory (pinned exempt). interval_hours > 0: `serve` runs it for every tenant.
    librarian_interval_hours: float = Field(default=0.0, ge=0)
    librarian_merge_similarity: float = Field(default=0.9, ge=-1.0, le=1.0)
    librarian_merge_lexical: float = Field(default=0.5, ge=0.0, le=1.0)
    librarian_distil: bool = True
    # one keyed fact per attribute a subject's episode states (where it lives or works, a
    # favourite thing), so a later value supersedes an earlier one in valid time
    librarian_attributes: bool = True
    librarian_topic_similarity: float = Field(default=0.45, ge=-1.0, le=1.0)  # chosen: bench
    librarian_max_sources: int = Field(default=6, ge=2, le=100)
    librarian_use_model: bool = True
    librarian_fact_boost: float = Field(default=0.05, ge=0.0, le=1.0)
    librarian_faded_boost: float = Field(default=-0.05, ge=-1.0, le=0.0)
    librarian_fade_after_days: float = Field(default=30.0, gt=0)

    # tenant lifecycle (SPEC section 10; mnemovault.tenants): a soft-deleted tenant is kept
    # DELETE_RETENTION_DAYS, then the purge (every tenant_purge_interval_hours in `serve`
    # and `worker`; 0: never in-process) hard-deletes it. Exports go to S3 when EXPORT_BUCKET
    # is set (export_endpoint_url for an S3-compatible server), else to export_dir (default
    # <data_dir>/exports); the outbox worker polls every worker_poll_seconds.
    delete_retention_days: float = Field(default=30.0, ge=0,
                                         validation_alias="DELETE_RETENTION_DAYS")
    tenant_purge_interval_hours: float = Field(default=6.0, ge=0)
    export_bucket: str | None = Field(default=None, validation_alias="EXPORT_BUCKET")
    export_prefix: str = "mnemovault-exports/"
    export_endpoint_url: str | None = None
    export_region: str | None = None
    export_dir: Path | None = None
    worker_poll_seconds: float = Field(default=5.0, gt=0)

    # the PII watch (SPEC section 3; mnemovault.pii.watch): `serve` and `worker` run it for
    # every tenant with values not covered yet every pii_watch_interval_hours (0: never
    # in-process; `mnemovault pii watch` runs it on demand), the first time
    # pii_watch_delay_seconds after start; a value is covered by a run at least
    # pii_watch_settle_seconds after the run that first saw it (writes under way then have
    # committed)
    pii_watch_interval_hours: float = Field(default=24.0, ge=0)
    pii_watch_delay_seconds: float = Field(default=900.0, ge=0)
    pii_watch_settle_seconds: float = Field(default=600.0, ge=0)

    # procedural memory (SPEC section 9; mnemovault.procedures.ranking): recall score =
    #   w_similarity * cosine + w_track * (successes + a) / (runs + a + b)
    #   + w_freshness * 2^(-days since last use / half_life), over procedure_candidates
    #   nearest; prune (None: off) deletes runs older than prune_runs_days and unpinned
    #   procedures unused for prune_unused_days
    procedure_similarity_weight: float = Field(default=1.0, ge=0)
    procedure_track_weight: float = Field(default=0.3, ge=0)
    procedure_freshness_weight: float = Field(default=0.05, ge=0)
    procedure_freshness_half_life_days: float = Field(default=30.0, gt=0)
    procedure_prior_successes: float = Field(default=1.0, gt=0)
    procedure_prior_failures: float = Field(default=1.0, gt=0)
    procedure_candidates: int = Field(default=50, ge=1, le=1000)
    procedure_prune_runs_days: float | None = Field(default=None, gt=0)
    procedure_prune_unused_days: float | None = Field(default=None, gt=0)
    # run evaluators (mnemovault.procedures.evaluators): the default evaluator's name
    # (None: "rule" for evaluations; record_run judges only with a configured or named
    # one); the "model" evaluator's endpoint (None: the chat model's; the chat API key is
    # reused only with the chat base URL)
    procedure_evaluator: str | None = Field(default=None, min_length=1, max_length=64)
    evaluator_model: str | None = None
    evaluator_base_url: str | None = None
    evaluator_api_key: str | None = None
    evaluator_timeout_seconds: float = Field(default=60.0, gt=0)

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

    # capture guard and review gate (SPEC section 8; mnemovault.guard.capture): a capture
    # with a finding at or above block_at_severity (Low, Medium, High, Critical; any case)
    # is refused; detectors are built-in names (secrets, government_ids) or dotted paths
    # ("pkg.module:factory"), each given capture_detector_timeout_ms per item before the
    # capture fails closed; capture_hook ("pkg.module:fn") is called on every refusal
    # and detector failure (default: a log line with ids only)
    block_at_severity: str = Field(default="High", validation_alias="BLOCK_AT_SEVERITY",
                                   pattern=r"(?i)^(low|medium|high|critical)$")
    require_review: bool = Field(default=False, validation_alias="REQUIRE_REVIEW")
    capture_detectors: list[str] = Field(
        default_factory=lambda: ["secrets", "government_ids"])
    capture_detector_timeout_ms: float = Field(default=500.0, gt=0)
    capture_hook: str | None = None
    # injection sanitiser (SPEC section 7; mnemovault.guard.sanitise): its detectors, in
    # order ("learned": the classifier of mnemovault.guard.learned; "heuristic": the phrase
    # rules), and the learned detector's decision threshold, a probability strictly between
    # 0 and 1 (a window scoring at or above it is flagged; lower flags more). Default: the
    # threshold chosen on the development collections (bench/train_injection.py)
    injection_detectors: list[str] = Field(default_factory=lambda: ["learned", "heuristic"])
    injection_threshold: float = 0.96

    @field_validator("embedded_shared_buffers")
    @classmethod
    def _shared_buffers(cls, v: str) -> str:
        v = v.strip()
        m = re.fullmatch(r"(\d+)\s*(kB|MB|GB)", v)
        kb = int(m[1]) << {"kB": 0, "MB": 10, "GB": 20}[m[2]] if m else 0
        if v != "auto" and kb < 128 << 10:
            raise ValueError("MNEMOVAULT_EMBEDDED_SHARED_BUFFERS must be auto or a size "
                             "in kB, MB or GB of at least 128 MB, such as 512MB "
                             f"(got {v!r})")
        return v

    @field_validator("injection_threshold")
    @classmethod
    def _threshold(cls, v: float) -> float:
        if not 0.0 < v < 1.0:
            raise ValueError("MNEMOVAULT_INJECTION_THRESHOLD must be a probability strictly "
                             f"between 0 and 1 (got {v})")
        return v

    @field_validator("injection_detectors")
    @classmethod
    def _detectors(cls, v: list[str]) -> list[str]:
        names = [n.strip().lower() for n in v if n.strip()]
        unknown = [n for n in names if n not in ("learned", "heuristic")]
        if unknown or not names:
            raise ValueError("MNEMOVAULT_INJECTION_DETECTORS must list one or more of "
                             f"learned, heuristic (got {v})")
        return names

    # the edge (issue 22; mnemovault.api.edge): request body limits in bytes, per route
    # class, enforced while the body is read (Content-Length up front, then the chunks)
    # and before authentication: over it, 413 and the connection closed. Defaults a little
    # over the largest valid request of each class (the derivation is in api/edge.py):
    # everything else (keys, recall, erase, forget, wake...); one memory, rectified
    # content or a procedure run (100,000 characters, 6 bytes each as JSON escapes); chat,
    # its stream, the OpenAI endpoint and procedures; the batch (1,000 items of 100,000
    # characters)
    max_body_bytes: int = Field(default=256 * 1024, ge=1024)
    max_body_content_bytes: int = Field(default=1024 * 1024, ge=1024)
    max_body_large_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    max_body_batch_bytes: int = Field(default=1000 * (100_000 + 8192), ge=1024)

    # rate limits (issue 22; mnemovault.api.edge), in the `limits` package's notation
    # ("600/minute", "10/second;1000/hour"): per API key, one budget per class of request;
    # per client address for requests that fail authentication (checked before the key is
    # looked up) and for the routes that need no key. Over a budget: 429 with Retry-After.
    # Counters live in the process's memory: each server process counts on its own.
    rate_limits: bool = True
    rate_limit_write: str = "6000/minute"
    rate_limit_recall: str = "6000/minute"
    rate_limit_chat: str = "1200/minute"
    rate_limit_admin: str = "1200/minute"
    rate_limit_unauthenticated: str = "600/minute"
    rate_limit_public: str = "1200/minute"

    # self-registered agents (issue 22; mnemovault.agents): off by default. When on,
    # POST /v1/agents/register gives anyone who can reach the server a `service` key (read
    # and write, never pii:reveal) in the tenant named here, limited to a scope of its own
    # (`agent-<random>`), with its own rate budget on every request, a quota of stored
    # memories in its scope, and registration limited per client address.
    allow_self_registration: bool = Field(default=False,
                                          validation_alias="ALLOW_SELF_REGISTRATION")
    self_registration_tenant: str = Field(default="agents",
                                          pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    self_registration_quota: int = Field(default=1000, ge=0)
    rate_limit_register: str = "10/hour"
    rate_limit_agent: str = "120/minute"
    # separation of duties under the review gate (mnemovault.governance.review): false, an
    # item is approved only by another actor than the one that captured it (another key
    # id; the local operator is the one actor "local"); true allows self-approval
    review_self_approval: bool = Field(default=False, validation_alias="REVIEW_SELF_APPROVAL")
    # concurrency and outages (issue 29): an erase waits this long for the writes of its
    # subject (or scope) under way to commit before it answers Conflict (0: it fails at
    # once, as before); the pool's connection attempts give up after
    # db_connect_timeout_seconds, and a request that finds no connection in the pool
    # within that time asks the server directly, answering Unavailable at once when it is
    # down instead of waiting pool_timeout_seconds for a connection
    erase_lock_timeout_seconds: float = Field(default=5.0, ge=0, le=600)
    db_connect_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    pool_timeout_seconds: float = Field(default=30.0, gt=0)
    # the CLI talks to a running `mnemovault server` of its data dir (issue 28; read by
    # mnemovault.cli._remote before these settings are loaded); false: always local
    use_server: bool = True
    # the web console (issue 25; mnemovault.console) at /console of `mnemovault serve`: on
    # by default; its sessions (in this process's memory) end after console_idle_minutes
    # without a request and console_absolute_hours after sign-in, whichever comes first
    console: bool = True
    console_idle_minutes: float = Field(default=30.0, gt=0, le=24 * 60)
    console_absolute_hours: float = Field(default=12.0, gt=0, le=24 * 30)


def get_settings() -> Settings:
    return Settings()


OTHER_VARIABLES = ("MNEMOVAULT_API_KEY",  # the MCP command's key (mnemovault.cli.mcp)
                   "MNEMOVAULT_TEST_DATABASE_URL", "MNEMOVAULT_FUZZ_EXAMPLES")  # the tests'
"""``MNEMOVAULT_*`` variables read outside :class:`Settings`."""


def env_name(field: str) -> str:
    """The environment variable of a setting: its alias (``DATABASE_URL``) or
    ``MNEMOVAULT_<FIELD>``; a name that is no setting is returned as it is."""
    info = Settings.model_fields.get(field)
    if info is None:
        return field
    alias = info.validation_alias
    return alias if isinstance(alias, str) else f"MNEMOVAULT_{field.upper()}"


def known_variables() -> set[str]:
    """Every ``MNEMOVAULT_*`` (and aliased) variable mnemovault reads."""
    return {env_name(f) for f in Settings.model_fields} | set(OTHER_VARIABLES)


def unknown_variables(environ: dict[str, str]) -> list[tuple[str, str | None]]:
    """The ``MNEMOVAULT_*`` variables of ``environ`` that no setting reads (a misspelling is
    otherwise silently ignored), each with the closest known name (or None)."""
    import difflib

    known = sorted(known_variables())
    # compared without the prefix: MNEMOVAULT_REQUIRE_REVEIW is closest to REQUIRE_REVIEW
    bare = {k.removeprefix("MNEMOVAULT_"): k for k in known}
    out = []
    for name in sorted(environ):
        upper = name.upper()
        if upper.startswith("MNEMOVAULT_") and upper not in known:
            close = difflib.get_close_matches(upper.removeprefix("MNEMOVAULT_"), list(bare),
                                              n=1, cutoff=0.75)
            out.append((name, bare[close[0]] if close else None))
    return out

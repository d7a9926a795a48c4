"""Procedural memory, runs, feedback and the review gate (issue 12).

Revision ID: 0008_procedures
Revises: 0007_tenant_lifecycle
Create Date: 2026-12-01

A procedure is a ``memories`` row of type ``procedure`` (its embedding is the question's,
its content the pseudonymised name and intent; status, versions by ``parent_id``,
subject, provenance, pin and row-level security come with it) plus one row here:

* ``procedures``: the steps graph (validated jsonb), name and intent as stored
  (pseudonymised), and the counters recall ranks by (runs, successes, judged runs, judged
  successes, first and last use). ``ON DELETE CASCADE`` from its memory: the one forget
  path (which deletes ``memories`` rows) takes it along.
* ``procedure_runs``: one row per recorded run: time, duration, the agent's, the
  evaluator's and a person's verdict (``success`` and ``judged`` are generated from them:
  person over evaluator over agent), evaluator name and score, three feedback scores in
  [0, 1], the run's scope and subject, provenance. ``ON DELETE CASCADE`` from its
  procedure, so a forgotten procedure takes its runs; runs of a subject on *other* owners'
  procedures are removed by :func:`mnemovault.procedures.subjects.erase_subject_runs`.

``tenant_id`` leads every key and index; no foreign key crosses tenants.
"""

from alembic import context, op

from mnemovault.store.migrations.tenancy import tenant_table

revision = "0008_procedures"
down_revision = "0007_tenant_lifecycle"
branch_labels = None
depends_on = None

VERDICT = "CHECK ({col} IN ('success', 'failure'))"
UNIT = "CHECK ({col} >= 0 AND {col} <= 1)"


def upgrade() -> None:
    role = context.config.attributes.get("app_role", "mnemovault_app")
    if not role.replace("_", "").isalnum():
        raise ValueError("app_role: must be letters, digits and underscores")
    op.execute(
        """
        CREATE TABLE procedures (
          tenant_id        text NOT NULL REFERENCES tenants (tenant_id),
          memory_id        uuid NOT NULL,
          name             text NOT NULL,
          intent           text NOT NULL,
          steps            jsonb NOT NULL,
          runs             integer NOT NULL DEFAULT 0 CHECK (runs >= 0),
          successes        integer NOT NULL DEFAULT 0
                           CHECK (successes >= 0 AND successes <= runs),
          judged_runs      integer NOT NULL DEFAULT 0
                           CHECK (judged_runs >= 0 AND judged_runs <= runs),
          judged_successes integer NOT NULL DEFAULT 0
                           CHECK (judged_successes >= 0 AND judged_successes <= judged_runs),
          first_used       timestamptz,
          last_used        timestamptz,
          created_at       timestamptz NOT NULL DEFAULT now(),
          PRIMARY KEY (tenant_id, memory_id),
          FOREIGN KEY (tenant_id, memory_id) REFERENCES memories (tenant_id, id)
            ON DELETE CASCADE
        );
        CREATE INDEX procedures_last_used ON procedures (tenant_id, last_used);
        """
    )
    op.execute(
        f"""
        CREATE TABLE procedure_runs (
          tenant_id         text NOT NULL REFERENCES tenants (tenant_id),
          id                uuid NOT NULL,
          procedure_id      uuid NOT NULL,
          scope             text NOT NULL,
          subject_id        text,
          ran_at            timestamptz NOT NULL,
          duration_ms       double precision CHECK (duration_ms >= 0),
          agent_verdict     text {VERDICT.format(col="agent_verdict")},
          evaluator         text,
          evaluator_verdict text {VERDICT.format(col="evaluator_verdict")},
          score             double precision {UNIT.format(col="score")},
          person_verdict    text {VERDICT.format(col="person_verdict")},
          feedback_accuracy     double precision {UNIT.format(col="feedback_accuracy")},
          feedback_efficiency   double precision {UNIT.format(col="feedback_efficiency")},
          feedback_satisfaction double precision {UNIT.format(col="feedback_satisfaction")},
          feedback_at       timestamptz,
          provenance        jsonb NOT NULL DEFAULT '{{}}'::jsonb,
          created_at        timestamptz NOT NULL DEFAULT now(),
          success           boolean GENERATED ALWAYS AS
                            (coalesce(coalesce(person_verdict, evaluator_verdict,
                                               agent_verdict) = 'success', false)) STORED,
          judged            boolean GENERATED ALWAYS AS
                            (person_verdict IS NOT NULL OR evaluator_verdict IS NOT NULL)
                            STORED,
          PRIMARY KEY (tenant_id, id),
          FOREIGN KEY (tenant_id, procedure_id) REFERENCES procedures (tenant_id, memory_id)
            ON DELETE CASCADE
        );
        CREATE INDEX procedure_runs_procedure ON procedure_runs (tenant_id, procedure_id);
        CREATE INDEX procedure_runs_subject ON procedure_runs (tenant_id, subject_id, scope, id);
        CREATE INDEX procedure_runs_ran_at ON procedure_runs (tenant_id, ran_at);
        -- the review queue (pending items oldest id first) without scanning the tenant
        CREATE INDEX memories_pending_review ON memories (tenant_id, id)
          WHERE status = 'pending_review';
        """
    )
    tenant_table(op, "procedures", role, "SELECT, INSERT, UPDATE, DELETE", signed=True)
    tenant_table(op, "procedure_runs", role, "SELECT, INSERT, UPDATE, DELETE", signed=True)


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS memories_pending_review")
    op.execute("DROP TABLE IF EXISTS procedure_runs")
    op.execute("DROP TABLE IF EXISTS procedures")

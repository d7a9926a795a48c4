"""Data-subject rights (SPEC section 10): erase a subject within a scope, or a whole scope,
with a signed receipt; list and export a subject's memories; rectify a memory's content;
and the erasure ledger that survives a backup restore.

* :mod:`.erase`    -- erase (through the one forget path, :mod:`mnemovault.governance.forget`)
* :mod:`.receipt`  -- the signed erasure receipt: issue and verify (offline)
* :mod:`.access`   -- a subject's listing (keyset paged) and its JSON export
* :mod:`.rectify`  -- correct a memory's content in place
* :mod:`.ledger`   -- the ledger file (after-commit copy of ``erasure_ledger``), its export,
  and reapplying it after a restore
* :mod:`.models`   -- typed results

Subjects and scopes are matched as stored: a subject given as an email address (or a
known entity) is looked up by its placeholder, so the original value finds it.
"""

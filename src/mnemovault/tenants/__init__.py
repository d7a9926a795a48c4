"""Tenant lifecycle (SPEC section 10, issue 10 items 6 and 7).

* :mod:`.common` -- the typed confirmation ``DELETE-<tenant>``, the own-tenant check,
  where local archives live.
* :mod:`.lifecycle` -- soft delete with a grace period, cancel,
  and the hard delete (purge) of expired tenants, which leaves one ``TENANT_PURGE`` row in
  the reserved system tenant's audit chain.
* :mod:`.export` -- export jobs: request (a ``TENANT_EXPORT`` outbox event), status, and
  the archive writer (a local directory, or S3 with server-side encryption).
* :mod:`.worker` -- processes outbox events per tenant under that tenant's row-level
  security.
* :mod:`.schedule` -- the background threads ``mnemovault serve`` and ``mnemovault worker``
  run: the outbox worker and the periodic purge.
"""

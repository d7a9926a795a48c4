"""Memories: the write path (:mod:`mnemovault.memories.write`: remember, key versioning,
lineage and graph entries, one transaction with its audit row) and reads by id or page
(:mod:`mnemovault.memories.read`). Recall is :mod:`mnemovault.recall`; forgetting is
:mod:`mnemovault.governance`."""

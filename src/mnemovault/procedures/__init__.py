"""Procedural memory (SPEC section 9): how an agent solved a task, whether it worked, and
recall that prefers what has worked.

- :mod:`.service`: capture, new_version, get, recall, record_run, feedback, evaluate,
  prune, settle_versions (the design is in its docstring);
- :mod:`.models`: inputs and outputs; :mod:`.steps`: the steps graph's checks and the
  default name; :mod:`.plugins`: intent extractor and evaluator; :mod:`.evaluators`: the
  named run evaluators (``rule``, ``model``); :mod:`.ranking`: the
  recall score; :mod:`.render`: output; :mod:`.subjects`: what subject rights need;
- SQL: :mod:`mnemovault.store.procedures`.
"""

"""Personal data: detection (``pii.detect``), placeholders and the encrypted vault.

Kept free of imports on purpose: ``import mnemovault.pii`` must not pull phonenumbers,
python-stdnum, cryptography or an optional NER stack. Import the submodules you need.
"""

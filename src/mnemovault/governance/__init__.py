"""Governed operations: the one forget path (SPEC section 4), later pin and retention."""

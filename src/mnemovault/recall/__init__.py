"""Recall: hybrid retrieval (vector + full text) fused by rank, with recency and pin terms."""

"""Reproducible benchmark and ablation harness for graph-based RAG, built around HippoRAG 2."""

__version__ = "0.1.0"

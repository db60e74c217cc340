"""Ranking passages for questions: the methods (`methods/`, one registry), Personalized PageRank (`ppr`),
HippoRAG 2's recognition-memory filter (`recognition`), and cached rankings (`ranking_cache`)."""

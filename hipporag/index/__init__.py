"""The index of a corpus: OpenIE (`openie/`) -> embeddings (`embed`) -> synonymy (`synonymy`) -> the
entity/passage graph (`graph`), wired and cached as one identity by `build`."""

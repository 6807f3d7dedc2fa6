"""Readers for public corpora and task-specific data files (NER sentences, sentence pairs); pure Python."""

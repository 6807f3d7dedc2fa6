"""Data: corpora, labelled text, the prepared data area, the task types, entities and scores."""

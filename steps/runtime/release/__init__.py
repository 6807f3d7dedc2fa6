"""Release: the registry, the promotion gate, and rolling a model version out to KServe."""

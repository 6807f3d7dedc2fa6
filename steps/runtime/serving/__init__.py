"""Serving: the model server, the engine variants and their selection, the local server."""

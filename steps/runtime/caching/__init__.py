"""The step cache: content keys, the store of cached outputs, and how a step reuses them."""

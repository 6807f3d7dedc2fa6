"""The ground floor: configuration, contracts and the supported versions, which steps/, pipelines/ and the
CLI all import; it imports none of them, and the images copy it without the CLI."""

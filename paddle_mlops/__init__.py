"""paddle-mlops: PaddlePaddle models from git push to a served, monitored inference service."""

__version__ = "0.1.0"

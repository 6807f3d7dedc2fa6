"""The ERNIE model and its weights: build, load, export, pretrained staging, MLM pre-training."""

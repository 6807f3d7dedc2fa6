"""Pieces shared by the steps: argument conventions, S3 access, workspace staging, logging."""

"""Storage: S3 clients, the run's workspace, object-store publishing, each region's store."""

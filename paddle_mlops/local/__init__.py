"""Local executor: the Argo DAG as local processes."""

"""Hera pipeline definitions: WorkflowTemplates, the CronWorkflow and shared Kubernetes pieces."""

"""Launch templates: named, documented workloads that use the SDK."""

"""The REST API (FastAPI)."""

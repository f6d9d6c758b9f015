"""Small interfaces the app layer uses and the adapters implement.

Each port has an in-memory fake beside the real adapters (httpx's lesson), and one shared test
suite runs against every implementation.
"""

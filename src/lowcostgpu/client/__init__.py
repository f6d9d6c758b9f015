"""A typed HTTP client of the API."""

"""Small interfaces the app layer uses and the adapters implement."""

"""Values, status tables and the error tree. No I/O, no clock, no randomness."""

"""turnout models."""

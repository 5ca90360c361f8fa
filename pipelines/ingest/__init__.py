"""Landing -> bronze -> silver: typed, validated, deduplicated, with a quarantine for bad rows."""

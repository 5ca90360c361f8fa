"""turnout's batch jobs as plain functions: simulator, ingest, features, training, index."""

"""Feature jobs: silver Delta tables -> gold feature tables, each row stamped with when it became known."""

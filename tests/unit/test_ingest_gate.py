from pipelines.ingest.expectations import allowed_bad_share


def test_big_batches_are_held_to_the_share_and_small_ones_to_the_row_floor() -> None:
    assert allowed_bad_share(10_000, 0.2, 10) == 0.2
    # One bad line in a five-line delivery is a bad line, not a broken export.
    assert allowed_bad_share(5, 0.2, 10) == 1.0
    assert allowed_bad_share(40, 0.2, 10) == 0.25
    assert allowed_bad_share(40, 0.2, 0) == 0.2

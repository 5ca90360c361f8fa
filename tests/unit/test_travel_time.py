import h3
import numpy as np

from pipelines.features.travel_time import DAYPARTS, TravelTimeMatrix, build_travel_time, daypart_of_hour


def _cells() -> list[str]:
    center = h3.latlng_to_cell(40.7128, -74.0060, 7)
    return sorted(h3.grid_disk(center, 3))


def test_matrix_is_symmetric_grows_with_distance_and_peaks_are_slower() -> None:
    m = build_travel_time("nyc", _cells())
    drive = m.minutes[DAYPARTS.index("midday"), 0]
    assert np.allclose(drive, drive.T)
    origin = h3.latlng_to_cell(40.7128, -74.0060, 7)
    near, far = h3.grid_ring(origin, 1)[0], h3.grid_ring(origin, 3)[0]
    ids = [h3.str_to_int(c) for c in (origin, near, far)]
    t = m.lookup([ids[0], ids[0]], [ids[1], ids[2]], daypart=[2, 2])
    assert t[0] < t[1]
    peak = m.lookup([ids[0]], [ids[2]], daypart=[3])[0]
    assert peak > t[1]


def test_unknown_cells_read_as_nan_and_long_format_round_trips() -> None:
    m = build_travel_time("nyc", _cells())
    outside = h3.str_to_int(h3.latlng_to_cell(51.5, -0.12, 7))
    assert np.isnan(m.lookup([outside], [m.cells[0]], daypart=[0])[0])
    back = TravelTimeMatrix.from_frame(m.to_frame())
    assert np.array_equal(back.cells, m.cells)
    assert np.allclose(back.minutes, m.minutes)


def test_dayparts_cover_the_clock() -> None:
    assert list(daypart_of_hour([0, 7, 12, 18, 23])) == [0, 1, 2, 3, 0]

"""Facts every layer shares, each defined once: instants, geo maths, errors, the landing schema.

The bottom of the import graph: nothing here imports another turnout package (only the standard
library and numpy), so the simulator, the Feast repository, the models, the read side, the batch
jobs and the service can all depend on it.

* ``instants`` - UTC instants: parsing ISO-8601 with an offset, epoch micro/seconds, Spark's naive UTC;
* ``geo``      - the Earth's radius, haversine and chord distances, the distance bands;
* ``errors``   - failures that cross stage boundaries (a broken data contract);
* ``landing``  - the landing schema: what the platform delivers and how it is checked.
"""

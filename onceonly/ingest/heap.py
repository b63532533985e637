"""The garbage collector of an ingest process, set for a long-lived server's heap.

CPython's cyclic collector runs a young collection every 700 net allocations and, now and
then, a full one that walks every object alive: for ingest, the ~10⁵ objects of the
libraries it imported (pydantic, structlog, prometheus_client, aiohttp, confluent-kafka)
that live as long as the process. Under load each delivery's objects (request, headers,
task, future, envelope, record) are young while its acknowledgement is awaited, so the
collector kept promoting them and then walking the whole heap again for the few it freed.

:func:`settle` is called once, when the server is set up and before it serves anything:

* ``gc.freeze()`` moves everything alive then into a permanent generation that no
  collection walks again;
* the young generation's threshold goes from 700 to :data:`YOUNG_THRESHOLD`, so a
  collection runs after that many net allocations: the deliveries in flight are no longer
  promoted many times a second; what cycles there are (exceptions, aiohttp's
  request/protocol pairs) are still collected, a few MB later.

Measured with ``python -m bench.ingest_cpu`` (the collector's share of the event loop's
samples in py-spy went from 4 % to none).
"""

from __future__ import annotations

import gc

#: net allocations of tracked objects between young collections (CPython's default: 700)
YOUNG_THRESHOLD = 10_000


def settle() -> None:
    """Collect what start-up left, freeze the rest, raise the young threshold."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)

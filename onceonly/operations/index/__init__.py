"""The operator index: the topics materialised into RocksDB, so that an operator read
(``onceonly approvals``, ``onceonly trace``, ``onceonly dead-letters``, ``onceonly
catch-up``, the operator page) costs what its answer holds, not what the topics hold.
``onceonly index`` builds and follows it (:mod:`.build`); commands answer from it
(:mod:`.answers`) when ONCEONLY_INDEX_DIR names one, and say how far behind the topics it
was. See docs/operations.md, *The operator index*.
"""

from onceonly.operations.index.answers import (
    Answer,
    approvals,
    no_index_reason,
    one_view,
    trace,
    usage,
)
from onceonly.operations.index.build import Pass, follow, freshness, indexed_topics, one_pass
from onceonly.operations.index.lag import Behind
from onceonly.operations.index.reads import dead_letters, recent_skips, reply
from onceonly.operations.index.replied import Replied, replied, settled_keys
from onceonly.operations.index.store import IndexMissing, IndexStore

__all__ = [
    "Answer",
    "Behind",
    "IndexMissing",
    "IndexStore",
    "Pass",
    "Replied",
    "approvals",
    "dead_letters",
    "follow",
    "freshness",
    "indexed_topics",
    "no_index_reason",
    "one_pass",
    "one_view",
    "recent_skips",
    "replied",
    "reply",
    "settled_keys",
    "trace",
    "usage",
]

"""Fairness between tenants: each free slot to the waiting tenant served least of late
(round-robin among tenants served alike)."""

from __future__ import annotations

import contextvars
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from onceonly.processors.flow import tenants
from onceonly.processors.flow.tenants import FairScheduler, tenant_of
from onceonly.schemas.envelope import Envelope


def _drain(scheduler: FairScheduler[str], slots: int) -> list[str]:
    """Grant up to ``slots`` calls; returns their waiters in grant order."""
    out = []
    for _ in range(slots):
        granted = scheduler.grant()
        if granted is None:
            break
        out.append(granted[1])
    return out


def _queue(scheduler: FairScheduler[str], tenant: str, calls: int) -> None:
    """``calls`` waiting calls of ``tenant``, named its letter in lower case and a count."""
    for n in range(calls):
        scheduler.add(tenant, f"{tenant.lower()}{n}")


def test_a_tenant_arriving_during_a_flood_takes_the_next_free_slot() -> None:
    scheduler: FairScheduler[str] = FairScheduler(capacity=4)
    _queue(scheduler, "A", 10_000)
    assert _drain(scheduler, 4) == ["a0", "a1", "a2", "a3"]
    scheduler.add("B", "b0")
    scheduler.release("A")
    assert scheduler.grant() == ("B", "b0")
    scheduler.release("A")
    assert scheduler.grant() == ("A", "a4")


def _flooded(capacity: int, grants: int) -> FairScheduler[str]:
    """Tenant A alone, each slot refilled as it frees, for ``grants`` grants."""
    scheduler: FairScheduler[str] = FairScheduler(capacity=capacity)
    _queue(scheduler, "A", grants + capacity)
    _drain(scheduler, capacity)
    for _ in range(grants - capacity):
        scheduler.release("A")
        assert scheduler.grant() is not None
    return scheduler


def test_a_burst_during_a_flood_is_not_made_to_alternate_with_it() -> None:
    # 10 calls of B at 16 slots: alternation gave B 8 of the next 16 slots, so its last
    # two waited for another round of A's calls; B now takes the next 10
    scheduler = _flooded(capacity=16, grants=1_000)
    _queue(scheduler, "B", 10)
    granted = []
    for _ in range(12):
        scheduler.release("A")
        granted.append(scheduler.grant())

    assert [g[0] for g in granted if g is not None] == ["B"] * 10 + ["A"] * 2


def test_a_burst_takes_about_its_share_of_recent_grants_and_then_alternates() -> None:
    scheduler = _flooded(capacity=16, grants=1_000)
    _queue(scheduler, "B", 100)
    tenants = []
    for _ in range(40):
        released = "A" if scheduler.in_flight.get("A") else "B"
        scheduler.release(released)
        granted = scheduler.grant()
        assert granted is not None
        tenants.append(granted[0])

    first_a = tenants.index("A")
    assert 8 <= first_a <= 0.7 * 17 + 1  # B's run: about 0.7 x (capacity + 1)
    rest = "".join(str(t) for t in tenants[first_a:])
    assert "AAA" not in rest and "BBB" not in rest  # then, served alike: alternation


def test_slots_alternate_between_tenants_with_work() -> None:
    scheduler: FairScheduler[str] = FairScheduler(capacity=6)
    _queue(scheduler, "A", 5)
    _queue(scheduler, "B", 3)
    scheduler.add("C", "c0")
    assert _drain(scheduler, 6) == ["a0", "b0", "c0", "a1", "b1", "a2"]


def test_the_per_tenant_limit_holds_and_leaves_slots_to_others() -> None:
    scheduler: FairScheduler[str] = FairScheduler(capacity=8, per_tenant=2)
    _queue(scheduler, "A", 10)
    assert _drain(scheduler, 8) == ["a0", "a1"]
    assert not scheduler.ready()
    scheduler.add("B", "b0")
    assert scheduler.ready()
    assert scheduler.grant() == ("B", "b0")
    scheduler.release("A")
    assert scheduler.grant() == ("A", "a2")


def test_a_waiter_that_gives_up_is_forgotten() -> None:
    scheduler: FairScheduler[str] = FairScheduler(capacity=1)
    scheduler.add("A", "a0")
    scheduler.remove("A", "a0")
    assert scheduler.grant() is None
    assert scheduler.waiting == 0


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "grant", "release"]), st.sampled_from("ABCD")),
        max_size=200,
    ),
    capacity=st.integers(min_value=1, max_value=5),
    per_tenant=st.none() | st.integers(min_value=1, max_value=3),
)
def test_limits_hold_and_no_tenant_waits_behind_a_long_run_of_another(
    ops: list[tuple[str, str]], capacity: int, per_tenant: int | None
) -> None:
    scheduler: FairScheduler[int] = FairScheduler(capacity, per_tenant)
    running: dict[str, int] = {}
    waiting: dict[str, int] = {}
    #: (passed over, by whom): grants to one other tenant while this one could go
    passed: dict[tuple[str, str], int] = {}
    n = 0
    for op, tenant in ops:
        if op == "add":
            scheduler.add(tenant, n)
            n += 1
            waiting[tenant] = waiting.get(tenant, 0) + 1
        elif op == "release" and running.get(tenant):
            scheduler.release(tenant)
            running[tenant] -= 1
        elif op == "grant":
            eligible = {
                t
                for t, w in waiting.items()
                if w and (per_tenant is None or running.get(t, 0) < per_tenant)
            }
            granted = scheduler.grant()
            if granted is None:
                assert sum(running.values()) >= capacity or not eligible
                continue
            who = str(granted[0])
            assert who in eligible
            running[who] = running.get(who, 0) + 1
            waiting[who] -= 1
            passed = {k: v for k, v in passed.items() if k[0] != who}
            for other in eligible - {who}:
                passed[other, who] = passed.get((other, who), 0) + 1
                # a run of one tenant's grants past another lasts while its recent count
                # stays below the other's: at most about 0.7 x (capacity + 1)
                assert passed[other, who] <= capacity + 1
        assert sum(running.values()) <= capacity
        assert per_tenant is None or all(r <= per_tenant for r in running.values())
        assert scheduler.running == sum(running.values())


def test_counts_are_rescaled_without_changing_the_order() -> None:
    scheduler: FairScheduler[str] = FairScheduler(capacity=1)
    for n in range(200):  # the weight doubles per grant: rescaled every 40 grants
        scheduler.add("A" if n % 3 else "B", str(n))
    order = []
    for _ in range(200):
        granted = scheduler.grant()
        assert granted is not None
        order.append(granted[0])
        scheduler.release(granted[0])

    assert scheduler._weight < 1e12
    # served alike from the start: A and B alternate while both wait
    assert "".join(str(t) for t in order[:120]) == "BA" * 60


def _envelope(account: str | None) -> Envelope:
    at = datetime(2026, 12, 2, tzinfo=UTC)
    return Envelope("agentmail", "e1", "message.received", "t", account, "m", at, at, False, "{}")


def test_the_tenant_is_the_inbox_by_default_or_any_envelope_field() -> None:
    envelope = _envelope("acct-1")
    assert tenant_of("inbox", envelope, "inbox@x") == "inbox@x"
    assert tenant_of("inbox", envelope, None) == "acct-1"
    assert tenant_of("provider", envelope) == "agentmail"
    assert tenant_of("account_id", _envelope(None)) == ""


def test_the_tenant_set_for_a_burst_is_its_inbox_or_the_named_field() -> None:
    def set_then_read(key: str, inbox_id: str | None) -> str:
        tenants.set_tenant(key, _envelope("acct-1"), inbox_id)
        return tenants.current_tenant.get()

    run = contextvars.copy_context().run
    assert run(set_then_read, "inbox", "inbox@x") == "inbox@x"
    assert run(set_then_read, "account_id", "inbox@x") == "acct-1"
    assert run(set_then_read, "event_type", None) == "message.received"


def test_a_tenant_key_that_names_no_envelope_field_is_refused() -> None:
    import pytest

    from onceonly.foundation.errors import ConfigError
    from onceonly.foundation.settings import Settings

    assert Settings.from_env(tenant_key="account_id").tenant_key == "account_id"
    with pytest.raises(ConfigError, match="ONCEONLY_TENANT_KEY='inbx' names no envelope field"):
        Settings.from_env(tenant_key="inbx")

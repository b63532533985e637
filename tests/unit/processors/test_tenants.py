"""Fairness between tenants: free slots round-robin to the tenants with work waiting."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_a_flood_delays_another_tenant_by_at_most_one_call() -> None:
    scheduler: FairScheduler[str] = FairScheduler(capacity=4)
    for n in range(10_000):
        scheduler.add("A", f"a{n}")
    assert _drain(scheduler, 4) == ["a0", "a1", "a2", "a3"]
    scheduler.add("B", "b0")
    # B's turn comes after A's next one: one of A's calls at most goes before it
    scheduler.release("A")
    assert scheduler.grant() == ("A", "a4")
    scheduler.release("A")
    assert scheduler.grant() == ("B", "b0")


def test_slots_alternate_between_tenants_with_work() -> None:
    scheduler: FairScheduler[str] = FairScheduler(capacity=6)
    for n in range(5):
        scheduler.add("A", f"a{n}")
    for n in range(3):
        scheduler.add("B", f"b{n}")
    scheduler.add("C", "c0")
    assert _drain(scheduler, 6) == ["a0", "b0", "c0", "a1", "b1", "a2"]


def test_the_per_tenant_limit_holds_and_leaves_slots_to_others() -> None:
    scheduler: FairScheduler[str] = FairScheduler(capacity=8, per_tenant=2)
    for n in range(10):
        scheduler.add("A", f"a{n}")
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
def test_limits_hold_and_no_tenant_waits_behind_two_turns_of_another(
    ops: list[tuple[str, str]], capacity: int, per_tenant: int | None
) -> None:
    scheduler: FairScheduler[int] = FairScheduler(capacity, per_tenant)
    running: dict[str, int] = {}
    waiting: dict[str, int] = {}
    passed_over: dict[str, int] = {}  # grants to others while this tenant could go
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
            passed_over[who] = 0
            for other in eligible - {who}:
                passed_over[other] = passed_over.get(other, 0) + 1
                # round-robin: each other eligible tenant goes at most once before it
                assert passed_over[other] <= len(eligible) + 2
        assert sum(running.values()) <= capacity
        assert per_tenant is None or all(r <= per_tenant for r in running.values())
        assert scheduler.running == sum(running.values())


def _envelope(account: str | None) -> Envelope:
    at = datetime(2026, 12, 2, tzinfo=UTC)
    return Envelope("agentmail", "e1", "message.received", "t", account, "m", at, at, False, "{}")


def test_the_tenant_is_the_inbox_by_default_or_any_envelope_field() -> None:
    envelope = _envelope("acct-1")
    assert tenant_of("inbox", envelope, "inbox@x") == "inbox@x"
    assert tenant_of("inbox", envelope, None) == "acct-1"
    assert tenant_of("provider", envelope) == "agentmail"
    assert tenant_of("account_id", _envelope(None)) == ""


def test_a_tenant_key_that_names_no_envelope_field_is_refused() -> None:
    import pytest

    from onceonly.foundation.errors import ConfigError
    from onceonly.foundation.settings import Settings

    assert Settings.from_env(tenant_key="account_id").tenant_key == "account_id"
    with pytest.raises(ConfigError, match="ONCEONLY_TENANT_KEY='inbx' names no envelope field"):
        Settings.from_env(tenant_key="inbx")

"""The operator index on the three-node cluster that needs credentials
(``python -m devstack broker --nodes 3 --sasl``): ``onceonly index`` builds it with SCRAM
credentials, and trace, approvals list and dead-letters list and retry answer from it;
with a wrong password the build fails naming the credentials."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from pydantic import SecretStr

from devstack.cluster import LocalCluster
from onceonly.schemas.ledger import ReplyState
from testkit.fakes.agentmail_server import FakeAgentMail
from tests.conftest import SASL_USER
from tests.integration.operations.test_index import _draft
from tests.integration.stack.test_sasl import (
    REFUSED,
    _cli,
    _dead_letter,
    _env,
    _post,
    _security_env,
    _settings,
    _stack,
)
from tests.integration.workers import Stack

pytestmark = pytest.mark.integration


async def test_with_the_credentials_the_index_is_built_and_the_commands_answer_from_it(
    kafka_sasl_cluster: LocalCluster, mail: FakeAgentMail, tmp_path: Path
) -> None:
    client, stack = await _stack(kafka_sasl_cluster, mail, tmp_path, send_attempts=1)
    settings, producer = stack.settings, stack.producer
    index_dir = tmp_path / "index"
    env = {**_env(settings, stack, "cli"), "ONCEONLY_INDEX_DIR": str(index_dir)}
    try:
        stack.worker("w1", **_security_env(settings))
        await _dead_letter(settings, client, stack)  # <s0@example.com>: every send failed
        assert await _post(client, 1, stack) == 204
        await stack.until_sent(1, timeout_s=120)
        for key in ("reply-sasl-d1", "reply-sasl-d2"):
            await _draft(stack, key)
        await _draft(stack, "reply-sasl-d2", ReplyState.SENT)  # approved and sent since

        built, _ = await asyncio.to_thread(_cli, env, "index")
        listed, _ = await asyncio.to_thread(_cli, env, "approvals", "list", "--json")
        traced, _ = await asyncio.to_thread(_cli, env, "trace", "<s1@example.com>", "--json")
        letters, _ = await asyncio.to_thread(_cli, env, "dead-letters", "list")
        retried, _ = await asyncio.to_thread(_cli, env, "dead-letters", "retry")
        await stack.until_sent(2, timeout_s=120)
    finally:
        await client.close()
        for worker in stack.workers:
            worker.kill()
        producer.close(timeout_s=1)

    source = f"answered from the index at {index_dir}"
    assert built.returncode == 0, built.stderr[-2000:]
    assert "index is up to date with the topics" in built.stdout
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert [json.loads(line)["key"] for line in listed.stdout.splitlines()] == ["reply-sasl-d1"]
    assert source in listed.stderr
    assert traced.returncode == 0, traced.stderr[-2000:]
    trace = json.loads(traced.stdout)
    assert trace["outcome"] == "answered" and trace["answered_by"].startswith(source)
    assert letters.returncode == 0 and "1 open dead letter(s)" in letters.stdout, letters.stdout
    assert source in letters.stderr
    assert retried.returncode == 0 and "from 1 dead letter(s)" in retried.stdout, retried.stderr
    assert sorted(e.replied_to_message_id for e in mail.outbox) == [
        "<s0@example.com>",
        "<s1@example.com>",
    ]


def test_with_a_wrong_password_the_index_build_fails_naming_the_credentials(
    kafka_sasl_cluster: LocalCluster, mail: FakeAgentMail, tmp_path: Path
) -> None:
    good = _settings(kafka_sasl_cluster, tmp_path, SASL_USER[1])
    settings = good.model_copy(update={"kafka_sasl_password": SecretStr("wrong-password")})
    stack = Stack(settings, None, mail, tmp_path)  # type: ignore[arg-type]  # no producer
    env = {**_env(settings, stack, "cli"), "ONCEONLY_INDEX_DIR": str(tmp_path / "index")}

    built, took = _cli(env, "index")

    assert built.returncode == 1, built.stdout + built.stderr[-2000:]
    assert REFUSED in built.stderr, built.stderr[-2000:]
    assert took < 60
    assert "wrong-password" not in built.stderr + built.stdout

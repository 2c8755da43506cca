"""ingest.tasks.dead_letter_task: what a dead-letter target shows of itself."""

from __future__ import annotations

from ingest.tasks.dead_letter_task import DeadLetterTarget


def test_a_targets_repr_names_the_topic_but_not_the_producer_secrets() -> None:
    target = DeadLetterTarget("orders.dlq", (("sasl.username", "floe"), ("sasl.password", "hunter2-secret")))
    assert "orders.dlq" in repr(target)
    assert "hunter2-secret" not in repr(target) and "hunter2-secret" not in str(target)
    assert dict(target.producer_config)["sasl.password"] == "hunter2-secret"

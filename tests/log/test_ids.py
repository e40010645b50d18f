"""Run ids are safe file names or rejected; result ids and keys are deterministic."""

from __future__ import annotations

import pytest

from polyloop import InvalidRunIdError, check_run_id, new_run_id
from polyloop._log.ids import idempotency_key, result_id


@pytest.mark.parametrize(
    "run_id",
    ["../x", "/abs", "a/b", ".hidden", "-dash", "--help", "", "ünï", "a b", "a\nb", "a\x00b", "x" * 201, "..", ".", None, 5],
    ids=repr,
)
def test_unsafe_run_ids_are_rejected(run_id):
    with pytest.raises(InvalidRunIdError):
        check_run_id(run_id)


@pytest.mark.parametrize("run_id", ["a", "run-1", "A.b_c-9", "x" * 200, "a..b", "lead-"])
def test_safe_run_ids_pass(run_id):
    assert check_run_id(run_id) == run_id


def test_generated_run_ids_are_safe_and_sort_by_time():
    ids = [new_run_id() for _ in range(50)]
    for run_id in ids:
        assert check_run_id(run_id) == run_id
    assert len(set(ids)) == 50
    assert ids[0][:20] <= ids[-1][:20]


def test_result_ids_name_step_kind_and_attempt():
    assert result_id("model_call", 3, 1) == "s3-m1"
    assert result_id("action", 12, 2) == "s12-a2"


def test_idempotency_keys_are_stable_and_distinct():
    k = idempotency_key("r", 1, "pay", {"b": 2, "a": 1})
    assert k == idempotency_key("r", 1, "pay", {"a": 1, "b": 2})
    assert k != idempotency_key("r", 2, "pay", {"a": 1, "b": 2})
    assert k != idempotency_key("r2", 1, "pay", {"a": 1, "b": 2})
    assert k.startswith("pl-")


def test_a_key_asked_for_again_with_the_same_arguments_is_the_one_derived():
    # The loop and its walker derive the same key from one dict: the second answer is
    # remembered, and equals a fresh derivation from an equal dict, for every field.
    args = {"amount": 5, "to": "acct-1"}
    first = idempotency_key("r", 3, "pay", args, 2)
    assert idempotency_key("r", 3, "pay", args, 2) == first == idempotency_key("r", 3, "pay", dict(args), 2)
    for other in (("r", 4, "pay", args, 2), ("r", 3, "refund", args, 2), ("q", 3, "pay", args, 2),
                  ("r", 3, "pay", args, None), ("r", 3, "pay", {"amount": 6, "to": "acct-1"}, 2)):
        assert idempotency_key(*other) != first, other

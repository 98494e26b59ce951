"""The task state machine: only legal transitions, mapped onto A2A states."""

from __future__ import annotations

import itertools

import pytest

from middleware import FailedPrecondition, TaskState
from middleware.tasks import A2A_STATE, LEGAL_TRANSITIONS, IllegalTransition, check_transition

A2A_STATES = {
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
}


def test_every_state_maps_onto_an_a2a_state_and_terminal_ones_agree():
    assert set(A2A_STATE) == set(TaskState)
    assert set(A2A_STATE.values()) <= A2A_STATES
    a2a_terminal = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
    for state in TaskState:
        assert state.terminal == (A2A_STATE[state] in a2a_terminal)
        assert state.terminal == (not LEGAL_TRANSITIONS[state])


def test_the_happy_path_and_the_waiting_path_are_legal():
    path = ["submitted", "routing", "dispatched", "retrying", "dispatched", "routing", "dispatched"]
    path += ["input_required", "routing", "dispatched", "verifying", "completed"]
    for a, b in itertools.pairwise(path):
        check_transition(TaskState(a), TaskState(b))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("submitted", "completed"),
        ("submitted", "dispatched"),
        ("routing", "completed"),
        ("retrying", "verifying"),
        ("input_required", "completed"),
        ("completed", "routing"),
        ("failed", "routing"),
        ("rejected", "dispatched"),
        ("canceled", "input_required"),
    ],
)
def test_illegal_transitions_raise(old, new):
    with pytest.raises(IllegalTransition) as info:
        check_transition(TaskState(old), TaskState(new))
    assert isinstance(info.value, FailedPrecondition)
    assert info.value.reason == "ILLEGAL_TRANSITION"
    assert info.value.details == {"from": old, "to": new}


def test_no_state_reaches_itself_and_terminal_states_are_final():
    for state, targets in LEGAL_TRANSITIONS.items():
        assert state not in targets
        for target in TaskState:
            if target in targets:
                check_transition(state, target)
            else:
                with pytest.raises(IllegalTransition):
                    check_transition(state, target)

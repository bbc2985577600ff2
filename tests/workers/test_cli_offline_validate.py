"""``psych validate`` warns when one limit a Spec sets makes another unreachable: the Spec
stays valid (exit 0), the warning names the limit and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from psych_runtime.workers.cli import main

from .conftest import EXAMPLES, TOOLS_REF

AGENT = """\
kind: agent
name: support
instructions: Help.
model: {{model: gpt-4o-mini}}
limits: {limits}
"""


def validate(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(["validate", str(path)])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(
    ("limits", "warning"),
    [
        (
            "{max_steps: 10}",
            "limits.max_turns: 32 turns need at least 63 steps (a model call and a tool call "
            "per turn), but max_steps is 10: at most 5 turns are reachable (only follow-up "
            "messages add turns without a tool call)",
        ),
        (
            "{max_turns: 8, max_steps: 14}",
            "limits.max_turns: 8 turns need at least 15 steps (a model call and a tool call "
            "per turn), but max_steps is 14: at most 7 turns are reachable",
        ),
        (
            "{failure_streak_hard_stop: 3}",
            "limits.failure_streak_threshold: 3 is never reached: the Run fails at "
            "failure_streak_hard_stop (3) first, so a failing tool is never withheld",
        ),
        (
            "{repeat_call_threshold: 4, repeat_call_hard_stop: 4}",
            "limits.repeat_call_hard_stop: 4 is not above repeat_call_threshold (4): the first "
            "refused repeat stops the Run, so the model is never told to change approach",
        ),
    ],
)
def test_a_limit_that_makes_another_unreachable_is_a_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, limits: str, warning: str
) -> None:
    spec = tmp_path / "agent.yaml"
    spec.write_text(AGENT.format(limits=limits))
    status, out, err = validate(capsys, spec)
    assert status == 0
    assert out == f"{spec}: valid\n"
    assert err.startswith(f"{spec}: warning: {warning}")
    assert len(err.splitlines()) == 1


def test_fallbacks_under_no_transient_budget_are_a_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # From an audit: with no transient retries a fallback is never tried, silently. A
    # warning, not a problem: a Version with them was valid, and is still started.
    spec = tmp_path / "agent.yaml"
    text = AGENT.replace("gpt-4o-mini}", "gpt-4o-mini, fallbacks: [gpt-4o]}")
    spec.write_text(text.format(limits="{transient_retry_budget: 0}"))
    status, out, err = validate(capsys, spec)
    assert (status, out) == (0, f"{spec}: valid\n")
    assert err == (
        f"{spec}: warning: model.fallbacks: never tried: limits.transient_retry_budget is 0, "
        "and each attempt on a fallback spends one of it; raise the budget or leave the "
        "fallbacks out\n"
    )
    spec.write_text(text.format(limits="{transient_retry_budget: 1}"))
    assert validate(capsys, spec) == (0, f"{spec}: valid\n", "")


@pytest.mark.parametrize(
    "limits", ["{max_turns: 8, max_steps: 15}", "{max_turns: 8}", "{failure_streak_hard_stop: 4}"]
)
def test_limits_that_fit_together_are_no_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, limits: str
) -> None:
    spec = tmp_path / "agent.yaml"
    spec.write_text(AGENT.format(limits=limits))
    status, out, err = validate(capsys, spec)
    assert (status, out, err) == (0, f"{spec}: valid\n", "")


def test_the_defaults_and_the_examples_are_no_warning(capsys: pytest.CaptureFixture[str]) -> None:
    # The defaults (48 steps, 32 turns) are a budget, not a plan: not judged.
    for example in ("support-agent.yaml", "onboarding-workflow.yaml"):
        capsys.readouterr()
        status = main(["validate", str(EXAMPLES / example), "--registry", TOOLS_REF])
        out, err = capsys.readouterr()
        assert (status, err) == (0, ""), err
        assert out.endswith("valid\n")


def test_a_workflow_steps_agent_is_judged_with_its_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = tmp_path / "workflow.yaml"
    spec.write_text(
        "kind: workflow\n"
        "name: onboard\n"
        "steps:\n"
        "  - kind: agent\n"
        "    name: welcome\n"
        "    spec: {kind: agent, name: greeter, instructions: Hi., model: {model: m},\n"
        "           limits: {max_steps: 3}}\n"
    )
    status, _, err = validate(capsys, spec)
    assert status == 0
    assert err.startswith(
        f"{spec}: warning: steps[welcome].spec.limits.max_turns: 32 turns need at least 63 steps"
    )


@pytest.mark.parametrize("limits", ["{max_steps: 5}", "{repeat_call_threshold: 6}"])
def test_a_workflows_own_limits_are_not_judged_as_an_agents(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, limits: str
) -> None:
    # A WorkflowRun has no turns and no model (limits.max_turns is unread, and so is
    # repeat_call_hard_stop: its first refused repeat fails a step). A workflow setting
    # max_steps was warned that its 32 turns need 63 steps, and one setting
    # repeat_call_threshold that "the model is never told to change approach".
    spec = tmp_path / "workflow.yaml"
    spec.write_text(
        "kind: workflow\n"
        "name: onboard\n"
        "steps:\n"
        "  - kind: agent\n"
        "    name: welcome\n"
        "    spec: {kind: agent, name: greeter, instructions: Hi., model: {model: m}}\n"
        f"limits: {limits}\n"
    )
    assert validate(capsys, spec) == (0, f"{spec}: valid\n", "")

"""The built-in rules over the efficacy benchmark's trajectories, played through a real engine: recall of
planted mistakes within the rules' scope >= 95 %, false reports on clean look-alikes <= 2 %, per rule."""

from __future__ import annotations

from pathlib import Path

from bench.observers import KINDS, RULES, TRAJECTORIES, run_trajectories, summarize


def test_the_trajectories_cover_every_rule_both_ways_in_every_kind_of_session() -> None:
    assert len(TRAJECTORIES) >= 60
    for rule in RULES:
        mine = [t for t in TRAJECTORIES if t.rule == rule]
        assert {t.planted for t in mine} == {True, False}, rule
        assert {t.kind for t in mine} == set(KINDS), rule
    assert len({t.name for t in TRAJECTORIES}) == len(TRAJECTORIES)


async def test_the_rules_catch_planted_mistakes_and_stay_quiet_on_look_alikes(tmp_path: Path) -> None:
    outcomes = await run_trajectories(tmp_path)
    for rule in RULES:
        figures = summarize(outcomes, rule)
        assert figures.recall >= 0.95, (rule, figures.missed)
        assert figures.false_rate <= 0.02, (rule, figures.false_names)
    # Reports made inside a running turn reach the agent in every kind of session.
    inside = [o for o in outcomes if o.trajectory.rule == "command-guard" and o.trajectory.planted]
    assert all(o.delivered == o.made for o in inside), [(o.trajectory.name, o.made, o.delivered) for o in inside]

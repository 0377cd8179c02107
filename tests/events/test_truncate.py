"""Cutting text for display: a cap is the most a value holds, the marker included."""

from __future__ import annotations

import pytest

from agentwatch.events import truncate, truncation_marker


@pytest.mark.parametrize("cap", [0, 1, 5, 29, 30, 31, 100, 1000])
def test_a_cut_text_fits_its_cap_marker_included_and_says_how_much_there_was(cap: int) -> None:
    """Once: the cap's worth of text was kept and the marker came on top (1000 chars came back as 1,031)."""
    text = "y" * 2000
    cut = truncate(text, cap)
    assert (len(cut.text), cut.truncated, cut.total_chars) == (cap, True, 2000)
    marker = truncation_marker(2000)
    if cap >= len(marker):
        assert cut.text == text[: cap - len(marker)] + marker
    else:
        assert cut.text == (text[: cap - 1] + "…" if cap else "")


def test_a_text_within_its_cap_is_kept_whole() -> None:
    assert truncate("abc", 3) == ("abc", False, 3)
    assert truncate("", 0) == ("", False, 0)
    with pytest.raises(ValueError, match="max_chars"):
        truncate("abc", -1)

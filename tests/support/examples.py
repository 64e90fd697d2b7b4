"""How many examples a property tries when it sets its own count: `examples`."""

from __future__ import annotations

from hypothesis import settings

#: The fewest examples a property with its own count tries under any profile.
FLOOR = 10


def examples(thorough: int) -> int:
    """``thorough`` under the ``thorough`` profile (tests/conftest.py); under another, the
    same share of it as that profile's default count is of thorough's (at least `FLOOR`)."""
    share = settings.default.max_examples / settings.get_profile("thorough").max_examples
    return max(FLOOR, min(thorough, round(thorough * share)))

"""Option values that several commands take alike, parsed one way for all of them."""

from __future__ import annotations

from control.errors import UserError


def parse_seeds(text: str, option: str = "--seeds") -> tuple[int, ...]:
    """Comma-separated integer seeds, each once: a seed given twice would run twice and
    weigh twice in every mean."""
    try:
        seeds = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UserError(f"{option}: {text!r} is not a comma-separated list of integers") from None
    if not seeds:
        raise UserError(f"{option}: no seed given")
    seen: set[int] = set()
    for seed in seeds:
        if seed in seen:
            raise UserError(f"{option}: seed {seed} given more than once")
        seen.add(seed)
    return seeds

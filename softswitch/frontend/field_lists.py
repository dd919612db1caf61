"""Code for the data of checksums and hashes: ``{ field, field, ... }`` lists.

Each item is ``(guard, width, value)``: the code of the header whose
validity guards the field (None for metadata), its width in bits (an int,
or the code of a varbit's current width) and the code of its value. Fields
of invalid headers are left out, as BMv2 does.
"""

from __future__ import annotations

import itertools

FieldItem = tuple[str | None, str | int, str]


def guarded(root: str, codes: list[str]) -> list[str]:
    """``codes`` run only when header ``root`` is valid, reading it through one local.

    The header is looked up once rather than once per field.
    """
    prefix = root + "."
    return [f"_g = {root}", "if _g._v:"] + ["    " + c.replace(prefix, "_g.") for c in codes]


def csum16_code(items: list[FieldItem]) -> str:
    """Code leaving in ``_s`` a number congruent to the data mod 0xFFFF, ``_n`` its bits.

    The Internet checksum only needs the data modulo 0xFFFF, and
    2**k = 2**(k % 16) mod 0xFFFF, so each field is added shifted by its
    distance from the end of the data modulo 16: small-int additions
    instead of one long bit string. Groups are visited from the last one
    so that ``_n`` (bits after the group) is known when a group is added;
    fields of invalid headers are skipped, as BMv2 does.
    """
    lines = ["_s = 0; _n = 0"]
    n_known: int | None = 0  # the value of _n when it is known at compile time
    groups = [(root, list(group)) for root, group in itertools.groupby(items, key=lambda s: s[0])]
    for root, members in reversed(groups):
        codes: list[str] = []
        run: list[tuple[int, str]] = []
        group_known = n_known
        for _root, width, code in reversed(members):
            if isinstance(width, int):
                run.insert(0, (width, code))
                continue
            added = csum16_run(run, group_known, codes)
            group_known = None if group_known is None else group_known + added
            codes.append(f"_s += {code} << (_n & 15)")
            codes.append(f"_n += {width}")
            group_known = None
            run = []
        added = csum16_run(run, group_known, codes)
        group_known = None if group_known is None else group_known + added
        if root is None:
            lines.extend(codes)
            n_known = group_known
        else:
            lines.extend(guarded(root, codes))
            # After an optional group the bit count depends on validity.
            n_known = n_known if group_known == n_known else None
    return "\n".join(lines)


def csum16_run(run: list[tuple[int, str]], n_known: int | None, codes: list[str]) -> int:
    """Add a run of fixed-width fields that ends ``_n`` bits before the data end."""
    if not run:
        return 0
    offset = 0
    terms: list[str] = []
    for width, code in reversed(run):
        shift = offset % 16
        terms.append(f"({code} << {shift})" if shift else code)
        offset += width
    total = " + ".join(reversed(terms))
    if n_known is None:
        codes.append(f"_s += ({total}) << (_n & 15)")
    elif n_known % 16:
        codes.append(f"_s += ({total}) << {n_known % 16}")
    else:
        codes.append(f"_s += {total}")
    codes.append(f"_n += {offset}")
    return offset


def bit_string_code(items: list[FieldItem]) -> str:
    """Code for ``_d`` (the data as one bit string) and ``_n`` (its bits)."""
    lines = ["_d = 0; _n = 0"]
    for root, group in itertools.groupby(items, key=lambda s: s[0]):
        members = list(group)
        # One expression per run of fixed-width fields: (_d << total) | (a << ..) | b
        codes: list[str] = []
        run: list[tuple[int, str]] = []

        def flush(run: list[tuple[int, str]] = run, codes: list[str] = codes) -> None:
            if not run:
                return
            total = sum(w for w, _ in run)
            shift = total
            terms = [f"(_d << {total})"]
            for width, code in run:
                shift -= width
                terms.append(f"({code} << {shift})" if shift else code)
            codes.append(f"_d = {' | '.join(terms)}; _n += {total}")
            run.clear()

        for _root, width, code in members:
            if isinstance(width, int):
                run.append((width, code))
            else:
                flush()
                codes.append(f"_d = (_d << {width}) | {code}; _n += {width}")
        flush()
        if root is None:
            lines.extend(codes)
        else:
            lines.extend(guarded(root, codes))
    return "\n".join(lines)

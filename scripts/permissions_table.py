"""Print docs/security.md's table of what each role may call and which resources each method names, from
engine/api/permissions.py and engine/api/resources.py.

    python scripts/permissions_table.py      # paste between the markers in docs/security.md

tests/security/test_roles.py checks that the document holds exactly this table.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.api.permissions import ROLES, RULES  # noqa: E402
from engine.api.resources import resources_of  # noqa: E402


def table() -> str:
    lines = ["| method | least role | " + " | ".join(ROLES) + " | resources it names |",
             "|---|---|" + "---|" * len(ROLES) + "---|"]
    for method in sorted(RULES):
        need = RULES[method]
        marks = ["yes" if ROLES.index(r) >= ROLES.index(need) else "-" for r in ROLES]
        named = ", ".join(f"`{param}` ({kind})" for param, kind in sorted(resources_of(method).items())) or "-"
        lines.append(f"| `{method}` | {need} | " + " | ".join(marks) + f" | {named} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())

"""Print docs/security.md's table of what each role may call, from engine/api/permissions.py.

    python scripts/permissions_table.py      # paste between the markers in docs/security.md

tests/security/test_roles.py checks that the document holds exactly this table.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.api.permissions import JOB_METHODS, ROLES, RULES  # noqa: E402


def table() -> str:
    lines = ["| method | least role | " + " | ".join(ROLES) + " |", "|---|---|" + "---|" * len(ROLES)]
    for method in sorted(RULES):
        need = RULES[method]
        marks = ["yes" if ROLES.index(r) >= ROLES.index(need) else "-" for r in ROLES]
        scope = " (own projects' jobs)" if method in JOB_METHODS else ""
        lines.append(f"| `{method}`{scope} | {need} | " + " | ".join(marks) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())

"""The checker's rule for the control plane's commit-order labels (``commit_order``: lakelog
orders positions and member states by them), read with delta-rs only, as ``chaos.checker``:
``order_label_disagrees`` when, for one partition's positions, one member's states, or a group's
rows around its deletion, the labels do not rise strictly with Delta's commit versions, or a label
is above its row's commit version."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from chaos.checker_reads import read_changes

if TYPE_CHECKING:
    from chaos.checker import Findings


def _label_keys(table: str, r: dict) -> list[tuple]:
    """The keys whose rows must be labelled in commit order: a partition's positions, a member's
    states, and all of a group's rows relative to its deletions."""
    if table == "group_members":
        return [(r["group"], r["member_id"])]
    keys = [("deletion", r["group"])]
    if r["kind"] in ("commit", "revoke", "reset") and r["partition"] >= 0:
        keys.append((r["group"], r["topic"], r["partition"]))
    return keys


def check_commit_order(root: str, out: Findings) -> None:
    """``order_label_disagrees``: see the module docstring."""
    for table in ("offset_commits", "group_members"):
        rows = [r for r in read_changes(f"{root}/control/{table}") if r.get("commit_order") is not None]
        last: dict[tuple, dict] = {}
        deletions: dict[str, list[dict]] = defaultdict(list)
        for r in sorted(rows, key=lambda r: r["_commit_version"]):
            if r["commit_order"] > r["_commit_version"]:
                out.add("order_label_disagrees", f"{table}: label {r['commit_order']} above version {r['_commit_version']}")
            if table == "offset_commits" and r["kind"] == "deleted":
                deletions[r["group"]].append(r)
            for key in _label_keys(table, r):
                if key[0] == "deletion":
                    continue
                prev = last.get(key)
                if prev is not None and prev["_commit_version"] < r["_commit_version"] and prev["commit_order"] >= r["commit_order"]:
                    out.add("order_label_disagrees", f"{table} {key}: label {r['commit_order']} (version "
                                                     f"{r['_commit_version']}) not above {prev['commit_order']} "
                                                     f"(version {prev['_commit_version']})")
                last[key] = r
        for r in rows:
            for d in deletions.get(r["group"], []):
                if r["_commit_version"] == d["_commit_version"]:
                    continue
                # readers cut off rows labelled at or below a deletion's label
                if (r["_commit_version"] < d["_commit_version"]) != (r["commit_order"] <= d["commit_order"]):
                    out.add("order_label_disagrees", f"{table}: {r['group']}'s row of version {r['_commit_version']} "
                                                     f"is on the other side of its deletion (version {d['_commit_version']}) by label")
        out.stats[f"labelled[{table}]"] = len(rows)

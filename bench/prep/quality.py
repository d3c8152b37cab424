"""bench/prep's scoring: which planted duplicate pairs a side found, and how precise its removals
were (README.md, "Quality", defines the figures)."""
from __future__ import annotations

HIGH_J = 0.8  # planted near pairs at or above this Jaccard similarity should be found


def score(removed: list[str], truth: list[dict]) -> dict:
    """Recall: a planted pair is found when at least one of its two documents was removed
    (keep-one-per-cluster removes all but one member, so every pair of a found cluster has one).
    Precision: the removed documents that belong to some planted pair (exact or near, any
    similarity), over all removed documents. Also: planted clusters with no member kept, and
    per planted pair whether it was found (for the agreement between sides)."""
    r = set(removed)
    planted = set()
    buckets = {"exact": [0, 0], "near_hi": [0, 0], "near_lo": [0, 0]}
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    found = []
    for p in truth:
        a, b = p["a"], p["b"]
        planted.update((a, b))
        key = "exact" if p["kind"] == "exact" else ("near_hi" if p["jaccard"] >= HIGH_J else "near_lo")
        buckets[key][1] += 1
        found.append(a in r or b in r)
        if found[-1]:
            buckets[key][0] += 1
        parent[find(a)] = find(b)
    members: dict[str, set[str]] = {}
    for x in planted:
        members.setdefault(find(x), set()).add(x)
    emptied = sum(1 for ms in members.values() if ms <= r)
    tp = len(r & planted)
    rec = {k: (v[0] / v[1] if v[1] else None) for k, v in buckets.items()}
    return {"removed": len(r), "true_removed": tp, "false_removed": len(r) - tp,
            "precision": tp / len(r) if r else None,
            "recall_exact": rec["exact"], "recall_near_ge_0_8": rec["near_hi"],
            "recall_near_lt_0_8": rec["near_lo"], "clusters_fully_removed": emptied,
            "pairs": {k: v[1] for k, v in buckets.items()},
            "found": found}  # per planted pair, in truth's order

"""The tables of Michel et al.'s experiment read from an `attnkit analyze heads` heads.json, for the
drivers that write them into the docs (bench/bible_heads_results.py: BLEU of a translation model at
three sites; bench/classifier_heads_results.py: accuracy of a classifier). `key` names the metric's
field in the rows (the JSON those drivers keep: "bleu", "accuracy")."""


def interval(d):
    """A comparison's point estimate and 95% interval ({"score", "low", "high"})."""
    return {"score": d["score"], "low": d["low"], "high": d["high"]}


def keep_one_and_single(heads, key):
    """Per layer and site, the head of highest importance kept alone (the layer's other heads at that
    site masked) against the unpruned model, with the range over every head kept alone; and every
    head masked alone against the unpruned model. Two lists of rows."""
    importance = heads["importance"]["importance"]
    ablation = heads["ablation"]
    keep, single = [], []
    for site in heads["sites"]:
        for layer in range(site["layers"]):
            row = site["first_row"] + layer
            best = max(range(len(importance[row])), key=lambda h: importance[row][h])
            cell = ablation["all_but_one_vs_unpruned"][row][best]
            keep.append({"site": site["name"], "layer": layer, "head": best,
                         key: ablation["all_but_one"][row][best], **interval(
                             {"score": cell["difference"], "low": cell["low"], "high": cell["high"]}),
                         "verdict": cell["verdict"],
                         "all_heads_min": min(ablation["all_but_one"][row]),
                         "all_heads_max": max(ablation["all_but_one"][row])})
            for h, c in enumerate(ablation["single_vs_unpruned"][row]):
                single.append({"site": site["name"], "layer": layer, "head": h, key: ablation["single"][row][h],
                               "difference": c["difference"], "low": c["low"], "high": c["high"],
                               "verdict": c["verdict"]})
    return keep, single


def pruning_steps(profile):
    """(k, step, change against the unpruned model) of each step of one order's profile that prunes
    more than the last (the unpruned model, and steps --min-heads left where the last one was,
    are skipped)."""
    stats = {s["step"]: s for s in profile["statistics"]["vs_unpruned"]}
    for k, step in enumerate(profile["steps"]):
        if k > 0 and step["pruned"] != profile["steps"][k - 1]["pruned"]:
            yield k, step, interval(stats[k]["difference"])


def profile_rows(heads, key):
    """The importance-order pruning profile of heads (not key/value groups), one row per step that
    prunes more than the last: the metric, its change against the unpruned model, the random orders'
    mean ± sd, the reverse order, importance − random and its verdict, heads gone per site."""
    profiles = {p["order"]: p for p in heads["profiles"] if not p.get("groups")}
    band = next(b for b in heads["random_orders"]["bands"] if b["unit"] == "head")
    versus = {c["step"]: c for c in band["importance_vs_random"]}
    rows = []
    for k, step, change in pruning_steps(profiles["importance"]):
        rows.append({"fraction": step["fraction"], "pruned": step["pruned"], key: step["metric"],
                     "pruned_by_site": step["pruned_by_site"], "change": change,
                     "random": {f: band["steps"][k]["metric"][f] for f in ("mean", "sd", "low", "high")},
                     "reverse": profiles["reverse"]["steps"][k]["metric"],
                     "importance_minus_random": interval(versus[k]["difference"]),
                     "verdict": versus[k]["verdict_text"]})
    return rows, len(band["seeds"])


def unpruned(heads):
    """The unpruned model's metric on the evaluation data with its bootstrap interval."""
    profile = next(p for p in heads["profiles"] if p["order"] == "importance" and not p.get("groups"))
    b = profile["statistics"]["vs_unpruned"][0]["b"]
    return {"score": b["score"], "low": b["low"], "high": b["high"]}


def level_until(rows):
    """(the last row still level with the unpruned model before any loses beyond its interval, the
    first row that loses beyond it); either None."""
    lost = [r for r in rows if r["change"]["high"] < 0]
    kept = [r for r in rows if not lost or r["pruned"] < lost[0]["pruned"]]
    return (kept[-1] if kept else None), (lost[0] if lost else None)

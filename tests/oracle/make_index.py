"""Write OUT/index.json: every golden case written by the gen_*.py scripts
(the JSON files under op/ net/ control/ zoo/ checker/ models/, except
models/*/value_info.json) with its kind, sorted by case name.  Other
folders of OUT (e.g. kernels/, maintained separately) are not indexed."""
import json
import os
import sys

OUT = os.path.abspath(sys.argv[1])


def main():
    cases = []
    walk = []
    for sub in ("op", "net", "control", "zoo", "checker", "models"):
        walk += list(os.walk(os.path.join(OUT, sub)))
    for root, dirs, files in walk:
        dirs.sort()
        for fn in sorted(files):
            if not fn.endswith(".json") or fn in ("index.json", "value_info.json"):
                continue
            path = os.path.join(root, fn)
            with open(path) as f:
                d = json.load(f)
            if "kind" not in d or "case" not in d:
                continue
            entry = {"case": d["case"], "kind": d["kind"], "json": os.path.relpath(path, OUT)}
            if "npz" in d:
                entry["npz"] = os.path.join(os.path.dirname(entry["json"]), d["npz"])
            if "caffe2_bug" in d:
                entry["caffe2_bug"] = True
            cases.append(entry)
    cases.sort(key=lambda e: e["case"])
    kinds = {}
    for e in cases:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump({"format_version": 1, "num_cases": len(cases), "kinds": kinds, "cases": cases},
                  f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# kiln from config alone against scikit-learn on public tables that ship in packages:
# the Palmer penguins (PyPI palmerpenguins: palmerpenguins/data/penguins.csv; also
# Debian's r-cran-palmerpenguins) for species (classification) and body mass
# (regression), and Seattle's weather (PyPI vega_datasets / Debian python3-vega-datasets:
# vega_datasets/_data/seattle-weather.csv). Each table is split once, 80/20 with a fixed
# seed, into data/<name>_{train,test}.csv (the original lines, so kiln parses the real
# file); kiln trains configs/<config>.toml on the split and scikit-learn fits a
# logistic or linear regression (and a random forest) on the same rows with the same
# encoding (standardised numbers, one-hot text, rows with a missing value dropped).
# Needs network once: installs scikit-learn, palmerpenguins and vega_datasets into the
# torch venv (benchmark-only). Prints one table; docs/data.md quotes it.
#
#   benchmarks/tabular_baselines.sh [SEEDS (3)]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kiln="${KILN_BUILD_DIR:-$root/build}/bin/kiln"
prefix="$("$root/scripts/setup" | tail -1)"
py="$(realpath "$prefix/../../../../../..")/bin/python"  # the torch venv (scripts/setup)
seeds="${1:-3}"
[[ -x "$kiln" ]] || { echo "tabular_baselines.sh: $kiln not built (scripts/kiln builds it)" >&2; exit 2; }
"$py" -c "import sklearn, palmerpenguins, vega_datasets" 2>/dev/null \
  || "$py" -m pip install -q scikit-learn palmerpenguins vega_datasets
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$root/data"

"$py" - "$root/data" <<'PY'
import os, shutil, sys, numpy as np, palmerpenguins, vega_datasets
out = sys.argv[1]
sources = {
    "penguins": os.path.join(os.path.dirname(palmerpenguins.__file__), "data", "penguins.csv"),
    "seattle-weather": os.path.join(os.path.dirname(vega_datasets.__file__), "_data", "seattle-weather.csv"),
}
for name, src in sources.items():
    shutil.copy(src, os.path.join(out, name + ".csv"))
    lines = open(src, newline="").read().splitlines(keepends=True)
    header, rows = lines[0], [l for l in lines[1:] if l.strip()]
    order = np.random.RandomState(0).permutation(len(rows))
    cut = int(round(0.8 * len(rows)))
    for part, idx in (("train", order[:cut]), ("test", order[cut:])):
        with open(os.path.join(out, f"{name}_{part}.csv"), "w", newline="") as f:
            f.write(header + "".join(rows[i] if rows[i].endswith("\n") else rows[i] + "\n" for i in idx))
PY

# name | config | table | metric
runs=("penguins species|penguins_species|penguins|accuracy"
      "penguins body mass|penguins_mass|penguins|r2"
      "Seattle weather|seattle_weather|seattle-weather|accuracy")
for r in "${runs[@]}"; do
  IFS='|' read -r title config table metric <<<"$r"
  for ((s = 0; s < seeds; s++)); do
    "$kiln" train "$root/configs/$config.toml" --run-dir "$tmp/$config-$s" \
      --set "data.train=$root/data/${table}_train.csv" --set "data.test=$root/data/${table}_test.csv" \
      --set "train.seed=$s" >"$tmp/$config-$s.txt" 2>&1 \
      || { cat "$tmp/$config-$s.txt" >&2; exit 1; }
  done
done

"$py" - "$root" "$tmp" "$seeds" <<'PY'
import json, sys, time, tomllib, numpy as np, pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.metrics import accuracy_score, mean_squared_error, r2_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
root, tmp, seeds = sys.argv[1], sys.argv[2], int(sys.argv[3])
runs = [("penguins species", "penguins_species", "penguins", "accuracy"),
        ("penguins body mass", "penguins_mass", "penguins", "r2"),
        ("Seattle weather", "seattle_weather", "seattle-weather", "accuracy")]
print(f"{'data set (rows train/test)':34}{'metric':10}{'kiln (mean of %d seeds)' % seeds:>26}"
      f"{'sklearn linear':>16}{'sklearn forest':>16}")
for title, config, table, metric in runs:
    cfg = tomllib.load(open(f"{root}/configs/{config}.toml", "rb"))["data"]
    label, feats = cfg["label"], cfg["features"]
    train = pd.read_csv(f"{root}/data/{table}_train.csv").dropna(subset=feats + [label])
    test = pd.read_csv(f"{root}/data/{table}_test.csv").dropna(subset=feats + [label])
    text = [c for c in feats if not pd.api.types.is_numeric_dtype(train[c])]
    nums = [c for c in feats if c not in text]
    enc = lambda: ColumnTransformer([("num", StandardScaler(), nums),
                                     ("cat", OneHotEncoder(handle_unknown="ignore"), text)])
    regression = metric == "r2"
    if regression:
        models = [LinearRegression(), RandomForestRegressor(n_estimators=300, random_state=0)]
    else:
        models = [LogisticRegression(max_iter=5000), RandomForestClassifier(n_estimators=300, random_state=0)]
    scores = []
    for m in models:
        p = make_pipeline(enc(), m).fit(train[feats], train[label])
        pred = p.predict(test[feats])
        scores.append(r2_score(test[label], pred) if regression else accuracy_score(test[label], pred))
    kiln = []
    for s in range(seeds):
        lines = [json.loads(l) for l in open(f"{tmp}/{config}-{s}/metrics.jsonl")]
        kiln.append([l for l in lines if l["split"] == "test"][-1][metric])
    fmt = (lambda v: f"R² {v:.3f}") if regression else (lambda v: f"{100 * v:.1f} %")
    k = np.array(kiln)
    print(f"{title + f' ({len(train)}/{len(test)})':34}{metric:10}"
          f"{fmt(k.mean()) + f' (±{k.std():.3f})' if regression else fmt(k.mean()) + f' (±{100 * k.std():.1f})':>26}"
          f"{fmt(scores[0]):>16}{fmt(scores[1]):>16}")
PY

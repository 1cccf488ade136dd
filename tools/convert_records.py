"""One-off: rewrite the experiment records of results/*.json in the runner's format (results/experiments/NAME.json),
without retraining, and write the figures the old records hold to tests/data/figures_before_conversion.json, read by
the old records' own keys, so that a test can check the renderer shows the same numbers from the new records."""
import json
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import experiment as runner  # noqa: E402

OLD, NEW = ROOT / "results", ROOT / "results" / "experiments"
BEST, AVG = "best epoch (validation BLEU)", "average of the last 5 epochs"
old = {p.stem: json.loads(p.read_text()) for p in OLD.glob("*.json")}
figures = []  # (experiment, run, seed, candidate, split, beam, bleu) and (experiment, run, seed, "history", epoch, field, value)


def fig(experiment, run, seed, candidate, split, beam, bleu):
    figures.append({"experiment": experiment, "run": run, "seed": seed, "candidate": candidate, "split": split,
                    "beam": beam, "bleu": bleu})


def scores(greedy=None, beam4=None, **kw):
    found = {}
    if greedy is not None:
        found["beam_1"] = {"bleu": greedy, **kw}
    if beam4 is not None:
        found["beam_4"] = {"bleu": beam4, **kw}
    return found


def run_entry(experiment, planned, name, history, candidates, seed=None, curve=None, hardware=None, torch=None,
              test=None, **extra):
    """One run in the runner's format. candidates: {candidate: {"val": {...}, "test": {...}}}; greedy val chooses."""
    plan = next(p for p in planned if p["name"] == name and (seed is None or p["seed"] == seed))
    settings = {k: v for k, v in asdict(plan["config"]).items() if k not in runner.NOT_SETTINGS}
    chosen = max((c for c in candidates if "beam_1" in candidates[c]["val"]),
                 key=lambda c: candidates[c]["val"]["beam_1"]["bleu"])
    for cand, by_split in candidates.items():
        for split, by_beam in by_split.items():
            for beam, r in by_beam.items():
                fig(experiment, name, plan["seed"], cand, split, int(beam.split("_")[1]), r["bleu"])
    for row in history:
        for key in ("val_bleu", "val_loss", "train_loss"):
            if key in row:
                figures.append({"experiment": experiment, "run": name, "seed": plan["seed"], "epoch": row["epoch"],
                                "field": key, "value": row[key]})
    return {"name": name, "seed": plan["seed"], "settings": settings, "history": history, "candidates": candidates,
            "chosen": chosen, **({"averaged_curve": curve} if curve is not None else {}),
            **({"hardware": hardware} if hardware else {}), **({"torch": torch} if torch else {}), **extra}


def plan(name):
    path = ROOT / "experiments" / f"{name}.json"
    spec = runner.read_experiment(path)
    return spec, runner.planned_runs(spec, path, Path("runs/experiments"))


def best_of(history):
    return max(r["val_bleu"] for r in history)


def write(name, spec, runs, chosen, hardware, torch, sources, ensembles=None, sweep=None, measure=None):
    measure = {"average_last": 5, "beams": [1, 4], "curve": False, "length_penalties": [], "limit": None,
               **spec.get("measure", {}), **(measure or {})}
    record = {"experiment": name, **spec, "measure": measure,
              "metric": "cased detokenized sacreBLEU; val chooses, test2016 only for the chosen run",
              "chosen": chosen, "hardware": hardware, "torch": torch, "runs": runs,
              **({"ensembles": ensembles} if ensembles else {}), **({"length_penalty": sweep} if sweep else {}),
              "converted_from": sources}
    runner.write_json(NEW / f"{name}.json", record)


def val_of(results):  # a results.json's val and test2016 scores, as candidate scores
    keep = lambda r: {k: r[k] for k in ("bleu", "unk", "sentences")}
    return {"val": {b: keep(r) for b, r in results["val"].items()},
            "test": {b: keep(r) for b, r in results["test2016"].items()}}


# precision: the recipe (38 epochs) and the 14-epoch recipe, each in fp32 and bf16, seed 0
spec, planned = plan("precision")
p = old["precision"]
r14, r38 = old["results_14_epochs"], old["results_38_epochs"]
runs = []
for name, pair, prec, shipped in (("fp32", "recipe", "fp32", r38), ("bf16", "recipe", "bf16", None),
                                  ("fp32, 14 epochs, dropout 0.1", "recipe_14", "fp32", r14),
                                  ("bf16, 14 epochs, dropout 0.1", "recipe_14", "bf16", None)):
    run = p[pair][prec]
    cands = {c: {"val": scores(v)} for c, v in p[pair]["candidates_val_bleu_greedy"][prec].items()}
    if shipped:  # this run's averaged candidate shipped once: its results.json holds beam 4 and test2016 too
        cands[shipped["checkpoint"]] = val_of(shipped)
    runs.append(run_entry("precision", planned, name, run["history"][:p[pair]["epochs_compared"]], cands,
                          hardware=run["hardware"], torch=run["torch"]))
write("precision", spec, runs, {"run": "bf16", "seed": 0, "candidate": BEST}, "2 CPU cores (x86_64, AMD EPYC)",
      "2.13.0+cpu", ["precision.json", "results_14_epochs.json", "results_38_epochs.json"])

# seeds: the recipe in bf16, seeds 0, 1, 2
spec, planned = plan("seeds")
runs = []
for seed, pair in ((0, "recipe"), (1, "recipe_seed1"), (2, "recipe_seed2")):
    run = p[pair]["bf16"]
    cands = {c: {"val": scores(v)} for c, v in p[pair]["candidates_val_bleu_greedy"]["bf16"].items()}
    runs.append(run_entry("seeds", planned, "recipe", run["history"], cands, seed=seed))
write("seeds", spec, runs, {"run": "recipe", "seed": 0, "candidate": BEST}, "2 CPU cores (x86_64, AMD EPYC)",
      "2.13.0+cpu", ["precision.json"])

# training length: dropout 0.1 for 22 epochs, 0.2 for 30, then 8 more with and without a cooldown (fp32, seed 0)
spec, planned = plan("training_length")
lo, r30 = old["longer"], old["results_30_epochs"]
names = {"dropout01": "dropout 0.1", "dropout02": "dropout 0.2", "dropout02_cooldown": "dropout 0.2, + 8 epochs cooling down",
         "dropout02_control": "dropout 0.2, + 8 epochs on equation 3"}
runs = []
for run in lo["runs"]:
    cands = {BEST: {"val": scores(best_of(run["history"]))}, AVG: {"val": scores(run["average_of_last_5"][-1]["val_bleu"])}}
    shipped = {"dropout02": r30, "dropout02_cooldown": r38}.get(run["name"])
    if shipped:
        assert shipped["candidates_val_bleu_greedy"] == {c: v["val"]["beam_1"]["bleu"] for c, v in cands.items()}
        cands[shipped["checkpoint"]] = val_of(shipped)
    runs.append(run_entry("training_length", planned, names[run["name"]], run["history"], cands,
                          curve=run["average_of_last_5"]))
write("training_length", spec, runs, {"run": names["dropout02_cooldown"], "seed": 0, "candidate": AVG},
      lo["hardware"], lo["torch"], ["longer.json", "results_30_epochs.json", "results_38_epochs.json"])

# wider: d_model 384 with dropout 0.3 and 0.2, beside the recipe's run (the 38-epoch fp32 run above)
spec, planned = plan("wider")
wd = old["wide"]
recipe_run = next(r for r in lo["runs"] if r["name"] == "dropout02_cooldown")
plain = next(r for r in lo["runs"] if r["name"] == "dropout02")
runs = [run_entry("wider", planned, "d_model 256, dropout 0.2 (the recipe)", recipe_run["history"],
                  {BEST: {"val": scores(best_of(recipe_run["history"]))}, AVG: {"val": scores(recipe_run["average_of_last_5"][-1]["val_bleu"])}},
                  curve=plain["average_of_last_5"] + recipe_run["average_of_last_5"])]
for run, name in zip(wd["runs"], ("d_model 384, dropout 0.3", "d_model 384, dropout 0.2")):
    runs.append(run_entry("wider", planned, name, run["history"],
                          {BEST: {"val": scores(best_of(run["history"]))}, AVG: {"val": scores(run["average_of_last_5"][-1]["val_bleu"])}},
                          curve=run["average_of_last_5"], parameters=run["parameters"], float16_megabytes=run["float16_megabytes"]))
write("wider", spec, runs, {"run": "d_model 256, dropout 0.2 (the recipe)", "seed": 0, "candidate": AVG},
      wd["hardware"], wd["torch"], ["wide.json", "longer.json"])

# R-Drop beside the recipe in bf16, seed 0
spec, planned = plan("rdrop")
rd = old["rdrop"]["runs"][0]
runs = [run_entry("rdrop", planned, "the recipe", p["recipe"]["bf16"]["history"],
                  {c: {"val": scores(v)} for c, v in p["recipe"]["candidates_val_bleu_greedy"]["bf16"].items()}),
        run_entry("rdrop", planned, "R-Drop, alpha 5", rd["history"],
                  {BEST: {"val": scores(best_of(rd["history"]))}, AVG: {"val": scores(rd["average_of_last_5"][-1]["val_bleu"])}},
                  curve=rd["average_of_last_5"])]
write("rdrop", spec, runs, {"run": "the recipe", "seed": 0, "candidate": BEST}, old["rdrop"]["hardware"],
      old["rdrop"]["torch"], ["rdrop.json", "precision.json"])

# two runs decoded together, in 16 and 8 bits, and a student of the pair
spec, planned = plan("two_runs_together")
pe, en = old["pair_ensemble"], old["ensemble"]
keep = lambda by_beam: {b: {"bleu": r["bleu"], "unk": r["unk"]} for b, r in by_beam.items()}
runs = []
for name in ("bf16, seed 1", "R-Drop"):
    member, row = en["members"][name], pe["rows"][name]
    cands = {c: {"val": scores(v)} for c, v in member["candidates_val_bleu_greedy"].items()}
    cands[member["checkpoint"]] = {"val": keep(row["val"])}
    runs.append(run_entry("two_runs_together", planned, name, member["history"], cands, float16_megabytes=row["megabytes"]))
st, row = pe["student"], pe["rows"]["student of the pair"]
cands = {c: {"val": scores(v)} for c, v in st["candidates_val_bleu_greedy"].items()}
cands[BEST]["val"] = keep(row["val"])
runs.append(run_entry("two_runs_together", planned, "student of the pair", st["history"], cands,
                      float16_megabytes=row["megabytes"]))
ensembles = []
for name, old_name, dtype in (("the pair, 16 bits", "pair, 16 bits", "float16"), ("the pair, 8 bits", "pair, 8 bits", "int8")):
    row = pe["rows"][old_name]
    ensembles.append({"name": name, "members": ["bf16, seed 1", "R-Drop"], "dtype": dtype, "megabytes": row["megabytes"],
                      **{split: keep(row[split]) for split in ("val", "test") if split in row}})
    for split in ("val", "test"):
        for beam, r in row.get(split, {}).items():
            fig("two_runs_together", name, None, "ensemble", split, int(beam.split("_")[1]), r["bleu"])
write("two_runs_together", spec, runs, {"ensemble": pe["chosen_on_val"].replace("pair", "the pair")}, pe["hardware"],
      pe["torch"], ["pair_ensemble.json", "ensemble.json"], ensembles=ensembles)

# norm placement: each placement at two warmups for an 8-epoch budget; the better warmup trained on to 14 epochs
spec, planned = plan("norm_placement")
npl = old["norm_placement"]
runs = []
for run in npl["runs"]:
    chosen = npl["chosen_warmup"][run["placement"]] == run["warmup"]
    cands = {BEST: {"val": scores(best_of(run["history"]))}}
    if chosen:
        cands[AVG] = {"val": scores(npl["average_of_last_5_val_bleu"][run["placement"]])}
    runs.append(run_entry("norm_placement", planned, f"{run['placement']}, warmup {run['warmup']}", run["history"], cands,
                          stopped_after_budget=not chosen))
write("norm_placement", spec, runs, {"run": "post-norm, warmup 1600", "seed": 0, "candidate": AVG}, npl["hardware"],
      npl["torch"], ["norm_placement.json"], measure={"beams": [1]})

# ablation: four runs for a 3-epoch budget; two of them trained on to 10 epochs
spec, planned = plan("ablation")
ab = old["ablation"]
names = {"words-untied-d01": "words, untied", "sub8k-untied-d01": "subwords, untied", "sub8k-tied-d01": "subwords, tied",
         "sub8k-tied-d03": "subwords, tied, dropout 0.3"}
runs = []
for row in ab["rows"]:
    full = next((f for f in ab["full_length"] if f["run"] == row["run"]), None)
    budget = {"epoch": ab["budget_epochs"], **{k: row[k] for k in ("train_loss", "val_loss", "val_bleu")}}
    history = full["history"] if full else [budget]
    if full:
        assert full["history"][ab["budget_epochs"] - 1]["val_bleu"] == row["val_bleu"]
    runs.append(run_entry("ablation", planned, names[row["run"]], history, {BEST: {"val": scores(best_of(history))}},
                          stopped_after_budget=full is None))
write("ablation", spec, runs, {"run": "subwords, tied", "seed": 0, "candidate": BEST}, ab["hardware"], "2.13.0+cpu",
      ["ablation.json"], measure={"beams": [1], "average_last": 0})

# distillation: four teachers, their ensemble, three students of the ensemble, and a second round
spec, planned = plan("distillation")
di, sd, lp = old["distill"], old["self_distill"], old["length_penalty"]
shipped = json.loads((ROOT / "annotated_transformer/pretrained/multi30k-de-en/results.json").read_text())
runs = []
for name, pair, prec in (("fp32, seed 0", "recipe", "fp32"), ("bf16, seed 0", "recipe", "bf16"),
                         ("bf16, seed 1", "recipe_seed1", "bf16"), ("bf16, seed 2", "recipe_seed2", "bf16")):
    cands = {c: {"val": scores(v)} for c, v in p[pair]["candidates_val_bleu_greedy"][prec].items()}
    runs.append(run_entry("distillation", planned, name, p[pair][prec]["history"], cands))
for name, key in (("student", "student_ensemble_only"), ("student of the ensemble's beam 4", "student_beam"),
                  ("wider student", "student_d384")):
    cands = {c: {"val": scores(v)} for c, v in di[key]["candidates_val_bleu_greedy"].items()}
    if key == "student_ensemble_only":
        assert [r["val_bleu"] for r in di[key]["history"]] == [r["val_bleu"] for r in shipped["history"]]
        cands[shipped["checkpoint"]] = val_of(shipped)
    runs.append(run_entry("distillation", planned, name, di[key]["history"], cands, hardware=di[key]["hardware"]))
runs.append(run_entry("distillation", planned, "second round", sd["student"]["history"],
                      {c: {"val": scores(v)} for c, v in sd["student"]["candidates_val_bleu_greedy"].items()}))
ensembles = [{"name": "the four teachers", "members": list(spec["ensembles"]["the four teachers"]["members"]),
              "dtype": "float32", "val": scores(di["ensemble_val_bleu_greedy"], di["ensemble_val_bleu_beam4"])}]
fig("distillation", "the four teachers", None, "ensemble", "val", 1, di["ensemble_val_bleu_greedy"])
fig("distillation", "the four teachers", None, "ensemble", "val", 4, di["ensemble_val_bleu_beam4"])
sweep = [{"alpha": r["alpha"], "val": r["val"] | {}, "test": r["test2016"]} for r in lp["runs"]]
for r in sweep:
    for split in ("val", "test"):
        r[split] = {"bleu": r[split]["bleu"], "length_ratio": r[split]["length_ratio"]}
        fig("distillation", "length penalty", None, r["alpha"], split, lp["beam_size"], r[split]["bleu"])
write("distillation", spec, runs, {"run": "student", "seed": 0, "candidate": AVG}, "2 CPU cores (x86_64, AMD EPYC)",
      "2.13.0+cpu", ["distill.json", "self_distill.json", "length_penalty.json", "precision.json"], ensembles=ensembles,
      sweep=sweep)

(ROOT / "tests" / "data").mkdir(exist_ok=True)
scores_ = [[f[k] for k in ("experiment", "run", "seed", "candidate", "split", "beam", "bleu")] for f in figures if "bleu" in f]
curves_ = {}
for f in figures:
    if "field" in f:
        curves_.setdefault(f["experiment"], {}).setdefault(f"{f['run']}|{f['seed']}|{f['field']}", []).append([f["epoch"], f["value"]])
fixture = {"about": "every BLEU and every history value of the experiment records before their conversion to the runner's "
                    "format, read by the old records' own keys (tools/convert_records.py in git history)",
           "scores": scores_, "history": curves_}
(ROOT / "tests" / "data" / "figures_before_conversion.json").write_text(json.dumps(fixture, separators=(",", ":")) + "\n")
print(len(figures), "figures;", len(list(NEW.glob("*.json"))), "records")

"""The GitHub Actions workflow parses and runs the same commands as .ci/run (the one place CI is defined here),
and publishes the site that tools/check.sh builds."""
import re

import yaml

from conftest import ROOT


def ci_run_commands():
    "The commands of .ci/run that install and test (comments, `set` and `cd` left out)."
    lines = [l.strip() for l in (ROOT / ".ci" / "run").read_text().splitlines()]
    return [l for l in lines if l and not l.startswith(("#", "set ", "cd ", "export ", "fi"))]


def normalise(command):
    "Commands compared without the CPU index of torch (a GitHub runner would otherwise pull a CUDA build)."
    return re.sub(r"\s+--index-url \S+", "", command)


def test_workflow_parses_runs_what_ci_runs_and_deploys_the_site_from_main():
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    assert {"test", "deploy"} <= set(wf["jobs"])
    steps = [normalise(line.strip()) for step in wf["jobs"]["test"]["steps"] if "run" in step
             for line in step["run"].splitlines() if line.strip()]
    for command in ci_run_commands():
        assert normalise(command) in steps, f".ci/run does `{command}`, the workflow does not"
    assert steps[-1] == "bash tools/check.sh"
    assert wf["jobs"]["test"]["container"].endswith("bookworm")  # Debian: the chromium package the site test drives
    # the site is deployed from main only
    upload = [s for s in wf["jobs"]["test"]["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact")]
    assert upload and upload[0]["with"]["path"] == "site" and "refs/heads/main" in upload[0]["if"]
    deploy = wf["jobs"]["deploy"]
    assert deploy["needs"] == "test" and "refs/heads/main" in deploy["if"]
    assert any(s.get("uses", "").startswith("actions/deploy-pages") for s in deploy["steps"])
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}

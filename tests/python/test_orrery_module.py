"""ctest `python_module`: imports the `orrery` Python module (python/) and checks it against the
CLI: the step time of a plan simulated from Python is the one `orrery simulate --json` prints,
the planner's best plan from Python is `orrery plan --json`'s, and errors keep their kinds.
Usage: test_orrery_module.py MODULE_DIR ORRERY"""
import json
import subprocess
import sys

sys.path.insert(0, sys.argv[1])
import orrery  # noqa: E402

cli = sys.argv[2]


def cli_json(*args):
    out = subprocess.run([cli, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


model = orrery.load_model("llama3-8b")
cluster = orrery.load_cluster("dgx-h100", nodes=2)
assert model.name == "llama3-8b" and model.num_layers == 32, model.to_json()
assert cluster.devices == 16, cluster.to_json()

result = orrery.simulate(model, cluster, global_batch=32, seq=2048, tp=8, pp=2, sp=True)
expected = cli_json("simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "2",
                    "--tp", "8", "--pp", "2", "--sp", "--global-batch", "32", "--seq", "2048")
assert result.engine == "analytic"
assert result.step_time_s == expected["step_time_s"], (result.step_time_s, expected["step_time_s"])
assert result.tokens_per_s == expected["tokens_per_s"]
assert result.breakdown["compute_s"] == expected["breakdown"]["compute_s"]
assert json.loads(result.to_json())["step_time_s"] == expected["step_time_s"]

ranked = orrery.plan(model, orrery.load_cluster("dgx-h100", nodes=1), global_batch=16, seq=2048,
                     top=3)
best = cli_json("plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "1",
                "--global-batch", "16", "--seq", "2048", "--top", "3", "--rerank", "none")
assert len(ranked) == 3, ranked
assert ranked[0].step_time_s == best["plans"][0]["result"]["step_time_s"], (
    ranked[0].step_time_s, best["plans"][0])
assert ranked[0].step_time_s <= ranked[1].step_time_s <= ranked[2].step_time_s

try:
    orrery.simulate(model, cluster, global_batch=32, seq=2048, tp=3)
    raise AssertionError("tp 3 on llama3-8b was accepted")
except ValueError as e:
    assert "tp" in str(e), e
try:
    orrery.load_model("/nonexistent/model.yaml")
    raise AssertionError("a missing model file was accepted")
except (OSError, ValueError) as e:
    assert "nonexistent" in str(e), e
print(f"python_module: step {result.step_time_s} s, best plan {ranked[0].step_time_s} s, as the CLI")

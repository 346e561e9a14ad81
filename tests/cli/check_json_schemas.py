#!/usr/bin/env python3
"""Every `--json` result of orrery validates against its schema under docs/schema/.

Runs real commands (the quick ones of every JSON shape), and for each: the output parses, its
`schema` names a file docs/schema/<schema>.schema.json, and the output validates against it.
Then each schema must reject the output with one of its required keys removed or renamed, so a
schema that accepts anything fails here too. Every schema file must be exercised by a command
(bench, which times this machine, is validated on a recorded shape in the C++ tests instead).

usage: check_json_schemas.py ORRERY_BIN REPO_ROOT WORK_DIR
"""
import json
import pathlib
import shutil
import subprocess
import sys
import tarfile

import jsonschema


def commands(root, work):
    inputs = root / "tests" / "inputs"
    shared = root.parent / "shared" / "validation"
    kineto = inputs / "traces" / "kineto" / "cpu_gloo_rank0.json"
    with tarfile.open(inputs / "traces" / "h200" / "h200-2026-11-26.tar.xz") as tar:
        tar.extractall(work, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    traces = work / "h200-2026-11-26"
    job = "--model llama3-8b --cluster dgx-h100 --nodes 1 --global-batch 16 --seq 4096"
    out = [
        "model list --json",
        "model flops llama3-8b --seq 4096 --json",
        "topo list --json",
        "topo check dgx-h100 --nodes 2 --json",
        # One node: no inter-node pair, the key is null.
        "topo check dgx-h100 --nodes 1 --json",
        f"simulate {job} --tp 4 --json",
        # A plan that does not fit prints the same keys (oom true).
        f"simulate {job} --tp 1 --allow-oom --json",
        f"simulate {job} --tp 4 --engine des --json",
        f"plan {job} --rerank none --quiet --json",
        f"plan {job} --rerank des --objective goodput --top 2 --quiet --json",
        f"goodput {job} --tp 4 --json",
        f"goodput {job} --tp 4 --restart-scope replica --json",
        # Degradation episodes stated by flag: the degradations list is not empty.
        f"goodput {job} --tp 4 --degradation gpu:mean_interval_s=7200000,step_ratio=1.3,"
        f"detect_steps=20 --degradation link:mean_interval_s=3600000,step_ratio=1.1,"
        f"duration_s=3600 --json",
        f"sweep {job} --tp 4 --vary nic-bandwidth=1,2 --vary micro-batch=1,2 --json",
        f"validate --trace {traces / 't1-gpt1.3b-s2048-m1.json'} --json",
        f"calibrate --traces {kineto} --device x86-64-AVX512-core --min-samples 2 "
        f"--out {work / 'profile.yaml'} --force --json",
    ]
    if (shared / "public_runs.json").exists():
        out.append(f"validate --runs {shared / 'public_runs.json'} --json")
        out.append(f"validate --runs {shared / 'public_runs.json'} --holdout-by framework --json")
    if (shared / "public_collectives.json").exists():
        out.append(f"validate --collectives {shared / 'public_collectives.json'} --json")
    return out


def run(orrery, args):
    r = subprocess.run([orrery, *args.split()], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"orrery {args}: exit {r.returncode}\n{r.stderr}")
    return json.loads(r.stdout)


def validator(schema_dir, name):
    path = schema_dir / f"{name}.schema.json"
    if not path.exists():
        raise SystemExit(f"no schema file {path} for the output named '{name}'")
    schema = json.loads(path.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def mutations(doc):
    """The output with one top-level key removed, then renamed: each must be rejected."""
    for key in list(doc)[2:]:
        gone = {k: v for k, v in doc.items() if k != key}
        yield f"without '{key}'", gone
        yield f"'{key}' renamed", {**gone, key + "_renamed": doc[key]}


def main():
    orrery, root, work = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    schema_dir = root / "docs" / "schema"
    used, failures = set(), []
    for args in commands(root, work):
        doc = run(orrery, args)
        name = doc.get("schema")
        v = validator(schema_dir, name)
        used.add(name)
        errors = sorted(v.iter_errors(doc), key=lambda e: list(e.path))
        for e in errors[:5]:
            failures.append(f"orrery {args}: {'/'.join(map(str, e.path))}: {e.message}")
        for what, bad in mutations(doc):
            if v.is_valid(bad):
                failures.append(f"{name}: the schema accepts the output {what}")
        print(f"ok {name}: orrery {args}")
    unused = {p.name.removesuffix(".schema.json") for p in schema_dir.glob("*.schema.json")}
    unused -= used | {"orrery.bench"}
    if unused:
        failures.append(f"schemas no command here exercised: {sorted(unused)}")
    shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("\n".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

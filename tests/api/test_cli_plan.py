"""attnd-cli's plans (clients/python/attnd/cli.py, docs/plan.md) without a server: one
expansion for `sweep` flags, `sweep --plan` and `plan`, the order attnd batch runs, and the
same refusals as server/front/batch/batch_plan.c. test_batch.py runs a `plan` output through attnd batch.
"""
import io
import json
import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
from attnd import cli  # noqa: E402

SWEEP_FLAGS = ["--backends", "naive,math", "--batch", "1", "--heads", "8,16", "--seq", "512,1024",
               "--head-dim", "64", "--dtype", "bf16", "--causal", "true", "--iters", "20", "--verify", "true",
               "--param", "profile=false"]


def plan_output(flags):
    out = io.StringIO()
    assert cli.main(["plan"] + flags, out=out) == 0
    return json.loads(out.getvalue())


def test_plan_command_writes_the_documented_example():
    assert plan_output(SWEEP_FLAGS) == {
        "backends": ["naive", "math"], "batch": [1], "heads": [8, 16], "seq": [512, 1024], "head_dim": [64],
        "dtype": ["bf16"], "params": {"iters": 20, "causal": True, "verify": True, "profile": False}}


def test_expansion_order_backends_outermost_dtype_innermost():
    grid = cli.plan_grid({"backends": ["a", "b"], "heads": [8, 16], "seq": [1, 2], "dtype": ["bf16", "fp16"],
                          "params": {"iters": 3}})
    assert len(grid) == 2 * 2 * 2 * 2
    assert grid[0] == {"backend": "a", "heads": 8, "seq": 1, "dtype": "bf16", "iters": 3}
    assert grid[1]["dtype"] == "fp16" and grid[2]["seq"] == 2 and grid[4]["heads"] == 16
    assert [g["backend"] for g in grid] == ["a"] * 8 + ["b"] * 8


def test_repeat_runs_the_whole_grid_again():
    grid = cli.plan_grid({"backends": ["a", "b"], "seq": [1, 2], "repeat": 3})
    once = cli.plan_grid({"backends": ["a", "b"], "seq": [1, 2]})
    assert grid == once * 3


def test_sweep_flags_plan_file_and_plan_command_expand_alike(tmp_path):
    from_flags = cli.sweep_grid(cli.build_parser().parse_args(["sweep"] + SWEEP_FLAGS))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_output(SWEEP_FLAGS)))
    from_file = cli.sweep_grid(cli.build_parser().parse_args(["sweep", "--plan", str(path)]))
    assert from_flags == from_file
    assert len(from_flags) == 2 * 1 * 2 * 2 * 1 * 1
    assert all(p["iters"] == 20 and p["verify"] is True for p in from_flags)


@pytest.mark.parametrize("plan,names", [
    ([], "JSON object"),
    ({"seq": [1]}, '"backends" is missing'),
    ({"backends": []}, '"backends"'),
    ({"backends": ["a"], "sequence": [1]}, 'unknown key "sequence"'),
    ({"backends": ["a"], "seq": [1.5]}, '"seq"'),
    ({"backends": ["a"], "seq": [1], "params": {"seq": 2}}, "params.seq"),
    ({"backends": ["a"], "params": {"backend": "b"}}, "params.backend"),
    ({"backends": ["a"], "params": {"keep_output": True}}, "params.keep_output"),
    ({"backends": ["a"], "repeat": 0}, '"repeat"'),
    ({"backends": ["a"], "params": []}, '"params"'),
])
def test_bad_plans_are_refused_naming_the_key(plan, names):
    with pytest.raises(cli.PlanError) as exc:
        cli.plan_grid(plan)
    assert names in str(exc.value)


@pytest.mark.parametrize("text,names", [
    ('{"backends": ["a"], "seq": [1], "seq": [2]}', "the key 'seq' appears twice"),
    ('{"backends": ["a"], "params": {"iters": 1, "iters": 2}}', "the key 'iters' appears twice"),
    ('{"backends": ["a"]}\0junk', "is not JSON"),
    ('{"backends": ["a"]} {"backends": ["b"]}', "is not JSON"),
    ('{"backends": ["a"], "params": {"iters\\u0000junk": 1}}', "\\u0000"),
    ('{"backends": ["a\\u0000b"]}', "\\u0000"),
    ('{"backends": ["a"], "params": {"scale": NaN}}', "NaN"),
])
def test_plan_files_are_read_as_strictly_as_attnd_batch_reads_them(tmp_path, text, names):
    path = tmp_path / "plan.json"
    path.write_text(text)
    with pytest.raises(cli.PlanError) as exc:
        cli.read_plan(str(path))
    assert names in str(exc.value), str(exc.value)
    assert cli.main(["sweep", "--plan", str(path)]) == 2


def test_sweep_plan_file_errors_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert cli.main(["sweep", "--plan", str(bad)]) == 2
    assert "not JSON" in capsys.readouterr().err
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"backends": ["a"]}))
    assert cli.main(["sweep", "--plan", str(good), "--seq", "8"]) == 2  # the file holds the whole grid
    assert "--plan holds the whole grid" in capsys.readouterr().err
    assert cli.main(["sweep"]) == 2
    assert "--backends" in capsys.readouterr().err
    assert cli.main(["sweep", "--plan", str(tmp_path / "missing.json")]) == 2


def _run_params_schema():
    with open(os.path.join(REPO, "docs", "openapi.json")) as f:
        return json.load(f)["components"]["schemas"]["RunParams"]


@pytest.mark.parametrize("params,names", [
    ({"iters": 1.0}, "params.iters: iters must be an integer from 0 to 100000, got 1.0"),
    ({"iters": True}, "params.iters: iters must be an integer"),
    ({"verify": 1}, "params.verify: verify must be true or false, got 1"),
    ({"min_time_ms": False}, "params.min_time_ms: min_time_ms must be a number"),
    ({"iters": 100001}, "got 100001"),
])
def test_plan_params_of_the_wrong_type_are_refused_before_any_run(params, names):
    """attnd batch refuses a plan whose params the server would refuse, before any run; a sweep
    checks its params' types against the server's RunParams schema the same way."""
    with pytest.raises(cli.PlanError) as exc:
        cli.check_plan_params({"backends": ["reference"], "params": params}, _run_params_schema())
    assert names in str(exc.value)


def test_plan_params_the_server_reads_are_let_through():
    schema = _run_params_schema()
    for params in ({"iters": 20, "verify": True, "min_time_ms": 300, "scale": 0.125},
                   {"iters": "12", "verify": "true"},      # strings: the server reads them
                   {"not_a_parameter_here": 1.0}):        # unknown: the server's to refuse
        cli.check_plan_params({"backends": ["reference"], "params": params}, schema)


def test_serving_flags_become_a_page_size_axis_and_shared_lengths():
    """--page-size is an axis of a sweep (0: the contiguous cache); --num-pages, --seqlens-q and
    --seqlens-kv are run parameters every point shares, written as the server reads them."""
    plan = plan_output(["--backends", "flash,cudnn", "--batch", "64", "--seq-q-kv", "1:8192", "--page-size",
                        "0,16,256", "--seqlens-kv", "uniform:128:8192", "--num-pages", "40000"])
    assert plan["page_size"] == [0, 16, 256]
    assert plan["params"] == {"seqlens_kv": "uniform:128:8192", "num_pages": 40000}
    grid = cli.plan_grid(plan)
    assert [(g["backend"], g["page_size"]) for g in grid] == [
        ("flash", 0), ("flash", 16), ("flash", 256), ("cudnn", 0), ("cudnn", 16), ("cudnn", 256)]
    with pytest.raises(cli.PlanError) as exc:  # one place for each parameter, as attnd batch says
        cli.plan_grid({"backends": ["a"], "page_size": [16], "params": {"page_size": 16}})
    assert "params.page_size" in str(exc.value)


def test_seqlens_tensor_ids_stay_out_of_the_plan():
    """A sweep's --seqlens-kv naming a resident tensor goes to every run, not into the plan
    (a plan file cannot hold a server's tensors); lengths stay in the plan."""
    args = cli.build_parser().parse_args(["sweep", "--backends", "reference", "--seqlens-kv", "t7",
                                          "--seqlens-q", "3,1,2"])
    assert cli._resident_inputs(args) == {"seqlens_kv": "t7"}
    assert cli.plan_of_args(args)["params"] == {"seqlens_q": "3,1,2"}


def test_the_table_shows_the_serving_layout():
    rows = [cli.row_of({"id": 1, "status": "done", "params": {"backend": "flash", "page_size": 16,
                                                                "seqlens_kv": {"dist": "uniform", "min": 128,
                                                                               "max": 8192}}}),
            cli.row_of({"id": 2, "status": "done", "params": {"backend": "flash", "page_size": 0,
                                                                "seqlens_q": list(range(100, 120))}})]
    assert rows[0]["page_size"] == 16 and rows[0]["seqlens"] == "kv uniform:128:8192"
    assert rows[1]["page_size"] is None
    assert rows[1]["seqlens"].startswith("q 100,101,") and len(rows[1]["seqlens"]) <= 26
    table = cli.format_table(rows)
    assert "page_size" in table.splitlines()[0] and "seqlens" in table.splitlines()[0]
    dense = cli.format_table([cli.row_of({"id": 3, "status": "done", "params": {"backend": "flash"}})])
    assert "page_size" not in dense and "seqlens" not in dense

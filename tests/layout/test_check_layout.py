"""The layout checker catches what it is for: a circle of calls, an include loop, a room that
reaches up. Its rules run over the real tree in `make test-layout`; here over small graphs."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layout  # noqa: E402


def test_cycles_finds_a_circle_and_only_it():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert check_layout.cycles(graph) == [["a", "b", "c"]]
    assert check_layout.cycles({"a": {"b"}, "b": set()}) == []


def test_shortest_cycle_names_the_files_in_order():
    graph = {"a": {"b", "c"}, "b": {"a"}, "c": {"b"}}
    assert check_layout.shortest_cycle(["a", "b", "c"], graph) == ["a", "b", "a"]


def test_a_room_may_not_reach_up():
    problems = []
    check_layout.check_reach("server/front/store/store.c", "server/front/http/http.h", "includes", problems)
    check_layout.check_reach("server/front/tensors/tensor_table.c", "server/front/routes/routes.h", "includes",
                             problems)
    assert len(problems) == 2 and "may not reach up to http" in problems[0]


def test_rooms_reach_down_and_folders_keep_to_their_rules():
    problems = []
    check_layout.check_reach("server/front/routes/runs.c", "server/front/pool/pool.h", "includes", problems)
    check_layout.check_reach("server/front/pool/pool.c", "server/front/store/store.h", "includes", problems)
    check_layout.check_reach("server/worker/gpu_job.c", "kernels/variants.h", "includes", problems)
    assert problems == []
    check_layout.check_reach("kernels/flash.cu", "server/worker/measure.h", "includes", problems)
    check_layout.check_reach("server/front/main.c", "server/worker/loop.h", "includes", problems)
    assert len(problems) == 2


def test_module_loops_through_a_third_module():
    files = ["x/a.c", "x/a.h", "x/b.c", "x/b.h", "x/c.c", "x/c.h"]
    graph = {"x/a.c": ["x/b.h"], "x/a.h": [], "x/b.c": ["x/c.h"], "x/b.h": [], "x/c.c": ["x/a.h"], "x/c.h": []}
    problems = []
    check_layout.check_include_loops(files, graph, problems)
    assert problems == ["modules include each other: x/a, x/b, x/c"]


def test_a_run_time_module_keeps_to_itself_and_shows_only_its_interface():
    problems = []
    check_layout.check_module_reach("kernels/flashinfer_loader.h", "kernels/flashinfer/flashinfer_abi.h", problems)
    check_layout.check_module_reach("kernels/flashinfer/flashinfer_module.cu", "kernels/flashinfer/flashinfer_module.h",
                                    problems)
    assert problems == []
    check_layout.check_module_reach("kernels/variants.c", "kernels/flashinfer/flashinfer_module.h", problems)
    check_layout.check_module_reach("kernels/flashinfer/flashinfer_decode.cu", "kernels/exec_context.h", problems)
    assert len(problems) == 2 and "only its own folder" in problems[1], problems

from bench.repro import side_by_side


def run(commit, wall, x, ok=0):
    return {"rev": commit, "commit": commit, "returncode": ok, "wall_s": wall, "stages": {"x": x}}


def test_interleaved_runs_of_two_commits_get_means_and_a_ratio():
    lines = side_by_side([run("a", 10.0, 4.0), run("b", 12.0, 6.0), run("a", 12.0, 4.0), run("b", 10.0, 4.0)], ["x"])
    assert "| x | 4.0 | 5.0 | 1.25x |" in lines
    assert "| **total** | 11.0 | 11.0 | 1.00x |" in lines


def test_no_summary_for_one_run_per_commit_or_a_failed_run():
    assert side_by_side([run("a", 10.0, 4.0), run("b", 12.0, 6.0)], ["x"]) == []
    assert side_by_side([run("a", 10.0, 4.0), run("b", 12.0, 6.0), run("a", 1.0, 1.0), run("b", 1.0, 1.0, ok=1)],
                        ["x"]) == []

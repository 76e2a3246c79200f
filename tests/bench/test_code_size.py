from bench import code_size

SOURCE = '''"""A module docstring
on two lines."""
import os  # a comment


def run(params):
    """Its docstring."""
    # a comment line
    x = [1,
         2]

    return os.sep, x


class A:
    """Docstring."""
    y = "not a docstring"
'''


def test_code_lines_leave_out_docstrings_comments_and_blank_lines():
    # import, def run, x = [1, / 2], return, class A, y = ...
    assert code_size.code_lines(SOURCE) == 7


def test_run_length_is_def_to_last_line():
    assert code_size.run_length(SOURCE) == 7
    assert code_size.run_length("def main():\n    pass\n") is None


def test_the_demo_corpus_total_is_the_sum_of_its_modules():
    r = code_size.measure()
    assert r["demo_corpus_total"] == sum(r["demo_corpus_modules"].values()) == r["packages"]["stages/demo_corpus"]
    assert "stages/train.py" in r["run_lines"] and "stages/demo_corpus/stage.py" in r["run_lines"]

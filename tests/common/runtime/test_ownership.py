"""What a stage may read and replace, checked before it starts: inputs exist (local, or a URL asked of the file
system the stage passes), outputs overlap nothing."""
import pytest

from stages.common.runtime.ownership import check_owned_paths, input_exists
from stages.common.runtime.params import ConfigError


def test_glob_inputs_and_unused_ones(tmp_path):
    (tmp_path / "in").mkdir()
    with pytest.raises(ValueError, match="overlaps input 'x.input'"):
        check_owned_paths("x", {"input": f"{tmp_path}/in/*.jsonl"}, {"out_dir": tmp_path / "in" / "out"})
    check_owned_paths("x", {"input": f"{tmp_path}/in/*.jsonl", "unused": ""}, {"out_dir": tmp_path / "out"})


def test_a_url_input_is_asked_of_the_file_system_the_stage_passes(tmp_path):
    asked = []
    def url_exists(url):
        asked.append(url)
        return url.endswith("/here")
    check_owned_paths("clean", {"input": "s3://bucket/here"}, {"out_dir": tmp_path / "out"}, url_exists=url_exists)
    with pytest.raises(ConfigError, match=r"^param 'clean.input': s3://bucket/gone does not exist$"):
        check_owned_paths("clean", {"input": "s3://u:pw@bucket/gone?sig=x"}, {"out_dir": tmp_path / "out"},
                          url_exists=lambda url: False)
    assert asked == ["s3://bucket/here"]


def test_a_url_where_a_stage_reads_local_paths_only_names_the_param(tmp_path):
    """Only `clean` reads URLs; the other stages depend on no file system code, and say so for a URL."""
    with pytest.raises(ConfigError, match=r"^param 'train.tokens_dir': s3://bucket/tokens is a URL; this stage "
                                          r"reads local paths only$"):
        check_owned_paths("train", {"tokens_dir": "s3://u:pw@bucket/tokens?sig=x"}, {"model_dir": tmp_path / "m"})
    with pytest.raises(ValueError, match="no file system to ask"):
        input_exists("s3://bucket/tokens")

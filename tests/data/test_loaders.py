"""load_dataset dispatch: names, aliases, default splits, option validation."""
import pytest

from maxk_jax.data.loaders import LOADERS, canonical_name, load_dataset


def test_names_and_aliases():
    assert canonical_name("CC") == "code_contests"
    assert canonical_name("livecodebench/code_generation_lite") == "livecodebench"
    assert canonical_name("open-r1/codeforces") == "codeforces"
    assert set(LOADERS) == {"code_contests", "livecodebench", "livebench", "codeforces", "mbpp", "humaneval",
                            "arithmetic"}
    with pytest.raises(ValueError, match="unknown dataset 'apps'"):
        canonical_name("apps")


def test_dispatch_humaneval_default_path_and_split():
    problems, report = load_dataset("humaneval")
    assert len(problems) == 164 and report.split == "test" and report.dataset == "humaneval"


def test_dispatch_with_path_and_options(tmp_path, write_rows):
    row = {"task_id": 1, "text": "Add.", "code": "def add(a, b): return a + b", "test_list": ["assert add(1, 2) == 3"],
           "test_setup_code": "", "challenge_test_list": []}
    path = write_rows(tmp_path / "mbpp.jsonl", [row])
    problems, report = load_dataset("mbpp", path, mode="assert")
    assert problems[0].mode == "assert" and report.params["mode"] == "assert"
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['seed'\] for dataset 'mbpp'"):
        load_dataset("mbpp", path, seed=1)


def test_parse_options_json_names_the_flag():
    from maxk_jax.data.loaders import parse_options_json
    assert parse_options_json('{"seed": 3}') == {"seed": 3}
    with pytest.raises(ValueError, match="--options is not valid JSON"):
        parse_options_json("{seed")
    with pytest.raises(ValueError, match="--opts must be a JSON object"):
        parse_options_json("[1]", flag="--opts")

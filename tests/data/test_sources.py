"""read_rows: single files of every format, save_to_disk directories, split-file selection, errors."""
import datasets
import pytest

from maxk_jax.data.sources import is_local, read_rows, split_files

ROWS = [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]


@pytest.mark.parametrize("name", ["rows.parquet", "rows.jsonl", "rows.jsonl.gz"])
def test_single_files(tmp_path, write_rows, name):
    path = write_rows(tmp_path / name, ROWS)
    assert list(read_rows(path, split="whatever")) == ROWS
    if name.endswith(".parquet"):
        assert list(read_rows(path, split="train", columns=["a"])) == [{"a": 1}, {"a": 2}]


def test_saved_dataset_and_dataset_dict(tmp_path):
    ds = datasets.Dataset.from_list(ROWS)
    ds.save_to_disk(str(tmp_path / "one"))
    assert list(read_rows(str(tmp_path / "one"), split="test")) == ROWS
    datasets.DatasetDict({"test": ds}).save_to_disk(str(tmp_path / "dd"))
    assert list(read_rows(str(tmp_path / "dd"), split="test")) == ROWS
    with pytest.raises(ValueError, match=r"split 'train' not in saved DatasetDict .*available: \['test'\]"):
        read_rows(str(tmp_path / "dd"), split="train")


def test_directory_split_selection(tmp_path, write_rows):
    d = tmp_path / "snap"
    write_rows(d / "data" / "train-00000-of-00002.parquet", ROWS[:1])
    write_rows(d / "data" / "train-00001-of-00002.parquet", ROWS[1:])
    write_rows(d / "data" / "test-00000-of-00001.parquet", [{"a": 9, "b": "t"}])
    write_rows(d / "data" / "training_extra.parquet", [{"a": 0, "b": "no"}])  # must not match split 'train'
    assert [p.name for p in split_files(d, "train")] == ["train-00000-of-00002.parquet", "train-00001-of-00002.parquet"]
    assert list(read_rows(str(d), split="train")) == ROWS
    assert list(read_rows(str(d), split="test")) == [{"a": 9, "b": "t"}]
    with pytest.raises(ValueError, match="no data files for split 'valid'"):
        read_rows(str(d), split="valid")


def test_bad_local_inputs(tmp_path, write_rows):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ValueError, match="unsupported data file"):
        read_rows(str(tmp_path / "notes.txt"), split="test")
    write_rows(tmp_path / "mix" / "test.parquet", ROWS)
    write_rows(tmp_path / "mix" / "test2.jsonl", ROWS)
    with pytest.raises(ValueError, match="data files mix formats"):
        read_rows(str(tmp_path / "mix"), split="test")
    assert is_local(tmp_path) and not is_local("deepmind/code_contests")


def test_corrupt_or_truncated_gzip_names_the_file(tmp_path, write_rows):
    good = tmp_path / "good.jsonl.gz"
    write_rows(good, ROWS * 200)
    data = good.read_bytes()
    (tmp_path / "trunc.jsonl.gz").write_bytes(data[:len(data) // 2])
    (tmp_path / "notgz.jsonl.gz").write_bytes(b'{"a": 1}\n')
    for name, why in (("trunc.jsonl.gz", "EOFError"), ("notgz.jsonl.gz", "BadGzipFile")):
        path = str(tmp_path / name)
        with pytest.raises(ValueError, match=f"{path}: not a readable gzip file .*{why}"):
            read_rows(path, split="test")


@pytest.mark.parametrize("name, text, line", [
    ("rows.jsonl", '{"a": 1, "b": "x"}\n{"a": 2, "b": }\n{"a": 3, "b": "z"}\n', 2),
    ("doc.json", '[{"a": 1, "b": "x"},\n {"a": 2,\n  "b": }]\n', 3),
])
def test_json_syntax_error_names_file_and_line(tmp_path, name, text, line):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=f"{path}:{line}: invalid JSON"):
        read_rows(str(path), split="test")


@pytest.mark.parametrize("missing", ["/no/such/dir/test.jsonl", "./no_such_dir", "~/no_such_maxk_dataset",
                                     "no_such.parquet", "data_dir/"])
def test_missing_local_path_says_it_does_not_exist(missing):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_rows(missing, split="test")


def test_missing_path_under_an_existing_directory_is_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    with pytest.raises(FileNotFoundError, match="'data/mbpp' does not exist"):
        read_rows("data/mbpp", split="test")


def test_datasets_is_imported_only_when_rows_are_read(tmp_path):
    # a GPU image without `datasets` runs the model, the sampler, the pipelines and the benchmarks;
    # reading rows then says what to install
    import subprocess
    import sys
    code = ("import sys; sys.modules['datasets'] = None\n"
            "import maxk_jax.pipelines, maxk_jax.data, maxk_jax.sampling, experiments.bench_accelerator\n"
            "from maxk_jax.data import sources\n"
            "try:\n"
            f"    sources.read_rows({str(tmp_path / 'rows.jsonl')!r}, split='train')\n"
            "except ImportError as e:\n"
            "    print('ImportError:', e)\n")
    (tmp_path / "rows.jsonl").write_text('{"a": 1}\n')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "needs the `datasets` package" in out.stdout

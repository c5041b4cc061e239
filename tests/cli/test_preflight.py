"""maxk_jax.cli.preflight: each check names the offending path / address and what is wrong with it,
and leaves nothing behind."""
import http.server
import json
import os
import shutil
import threading

import pytest

from maxk_jax.cli import preflight
from maxk_jax.data import Problem, StdioCase, StdioTests, save_problems


def _problem(i: int) -> Problem:
    return Problem(id=f"p/{i}", source="fixture", prompt=f"Print {i}.",
                   tests=StdioTests((StdioCase("", f"{i}\n"),)))


def test_problem_file_missing_empty_malformed_and_good(tmp_path):
    with pytest.raises(ValueError, match=r"problems file '.*nope.jsonl' does not exist"):
        preflight.check_problem_file(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="is not a file"):
        preflight.check_problem_file(tmp_path)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="empty.jsonl' is empty"):
        preflight.check_problem_file(tmp_path / "empty.jsonl")
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl' is not a Problem JSONL file"):
        preflight.check_problem_file(tmp_path / "bad.jsonl")
    save_problems([_problem(i) for i in range(3)], tmp_path / "good.jsonl")
    assert preflight.check_problem_file(tmp_path / "good.jsonl") == 3


def test_model_dir_missing_empty_and_corrupt_weights(tmp_path, tiny_ckpt):
    with pytest.raises(ValueError, match=r"model directory '.*absent' does not exist"):
        preflight.check_model_dir(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"model directory '.*empty' is empty"):
        preflight.check_model_dir(tmp_path / "empty")
    preflight.check_model_dir(tiny_ckpt)   # intact
    bad = tmp_path / "bad"
    shutil.copytree(tiny_ckpt, bad)
    weights = bad / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:len(data) // 2])   # truncated
    with pytest.raises(ValueError, match=r"corrupt safetensors file '.*model.safetensors': tensor .* outside"):
        preflight.check_model_dir(bad)
    weights.write_bytes(b"\x07" * 64)            # garbage: header longer than the file
    with pytest.raises(ValueError, match=r"corrupt safetensors file .* \(truncated or not a safetensors file\)"):
        preflight.check_model_dir(bad)
    preflight.check_model_dir(bad, weights=False)   # a resume without weights does not read them
    os.remove(bad / "tokenizer.json")
    with pytest.raises(ValueError, match="has no tokenizer"):
        preflight.check_model_dir(bad, weights=False)
    os.remove(bad / "config.json")
    with pytest.raises(ValueError, match="has no config.json"):
        preflight.check_model_dir(bad, weights=False)


def test_orbax_step_metadata(tmp_path):
    step = tmp_path / "7"
    (step / "state").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"corrupt orbax checkpoint '.*7': no state/_METADATA"):
        preflight.check_orbax_step(step)
    (step / "state" / "_METADATA").write_text("{trunc")
    with pytest.raises(ValueError, match="corrupt orbax checkpoint state metadata .* is not valid JSON"):
        preflight.check_orbax_step(step)
    (step / "state" / "_METADATA").write_text(json.dumps({"tree_metadata": {"a": 1}}))
    (step / "metadata").mkdir()
    (step / "metadata" / "metadata").write_text(json.dumps({"rl_step": 7}))
    assert preflight.check_orbax_step(step) == {"rl_step": 7}


def test_writable_dir_leaves_nothing_behind(tmp_path):
    preflight.check_writable_dir(tmp_path / "a" / "b")
    assert not (tmp_path / "a").exists() and os.listdir(tmp_path) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"output directory '.*file/sub' cannot be created: '.*file' is not a"):
        preflight.check_writable_dir(tmp_path / "file" / "sub")


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        code = 200 if self.path == "/healthz" else 404
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def test_executor_health_and_spec_syntax():
    assert preflight.executor_urls("embedded:4") == []
    with pytest.raises(ValueError, match="slots after ':' must be a positive integer"):
        preflight.check_executor("embedded:x")
    with pytest.raises(ValueError, match="unknown executor spec 'htp://x:1'"):
        preflight.check_executor("htp://x:1")
    with pytest.raises(ValueError, match=r"executor 'http://127.0.0.1:1' is unreachable: GET .*/healthz"):
        preflight.check_executor("http://127.0.0.1:1", timeout_s=1.0)
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        preflight.check_executor(url)
        preflight.check_executor(f"sandboxfusion+{url}")   # answers (404 on /): reachable
        with pytest.raises(ValueError, match="is unreachable"):
            preflight.check_executor(f"{url},http://127.0.0.1:1", timeout_s=1.0)
    finally:
        server.shutdown()

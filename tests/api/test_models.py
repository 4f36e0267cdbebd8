"""Model presets: GET /v1/models lists config/models.json with each preset's source, and a
presets file that cannot be read stops the start with the reason (like a bad setting)."""
import json
import subprocess

from attnd_api_helpers import REPO, attnd_bin


def test_models_lists_the_presets_with_their_sources(api):
    r = api.get("/v1/models")
    assert r.status_code == 200, r.text
    models = {m["name"]: m for m in r.json()["models"]}
    with open(REPO + "/config/models.json") as f:
        assert [m["name"] for m in json.load(f)["models"]] == list(models)
    for name in ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mistral-7b-v0.1", "qwen2.5-7b", "qwen2.5-72b",
                 "gemma-2-9b", "gemma-2-27b", "deepseek-v3-prefill"):
        assert name in models, name
        assert models[name]["source"].startswith("https://huggingface.co/"), models[name]
        assert models[name]["heads"] % models[name]["kv_heads"] == 0
    assert (models["llama-3.1-70b"]["heads"], models["llama-3.1-70b"]["kv_heads"]) == (64, 8)
    assert models["mistral-7b-v0.1"]["window"] == 4095  # HF's sliding_window 4096 counts the query itself
    assert (models["deepseek-v3-prefill"]["head_dim"], models["deepseek-v3-prefill"]["head_dim_v"]) == (192, 128)


def test_unreadable_presets_stop_the_start(tmp_path):
    bad = tmp_path / "models.json"
    bad.write_text('{"models": [{"name": "x", "heads": 6, "kv_heads": 4, "head_dim": 64, "source": "s"}]}')
    for path, why in ((str(bad), "does not divide"), (str(tmp_path / "missing.json"), "not found")):
        p = subprocess.run([attnd_bin(), "--models-file", path, "--data-dir", str(tmp_path / "d"), "--devices", "none",
                            "--listen", "127.0.0.1:0"], cwd=REPO, capture_output=True, text=True, timeout=20)
        assert p.returncode != 0 and why in p.stderr, p.stderr

"""The GPT exported as a transformers GPT-2 folder: same logits (float64 to rounding, float32
within the dtype's bound) with attn_implementation "qkv" and "eager", the same greedy
generation, and qkv look --model on the folder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qkv.cli import main
from qkv.tasks import gpt
from qkv.tasks import gpt_watch as watch
from qkv.tasks.corpus import CharTokenizer
from qkv.tasks.gpt_export import export

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

CONFIG = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=24, vocab_size=12, seed=7)
CHARS = "\n abcdefghiX"


def _model(dtype):
    m = gpt.GPT(CONFIG, dtype=dtype)
    rng = np.random.default_rng(2)
    for p in m.params.values():
        p[...] = rng.normal(0.0, 0.4, p.shape)
    return m


@pytest.fixture(scope="module", params=[np.float64, np.float32], ids=["float64", "float32"])
def exported(request, tmp_path_factory):
    from qkv.integrations.transformers import register

    register()
    model = _model(request.param)
    folder = export(model, CharTokenizer(CHARS), tmp_path_factory.mktemp("hf") / "gpt")
    return model, folder, request.param


def _hf(folder, impl, dtype):
    return transformers.AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation=impl, dtype=torch.float64 if dtype == np.float64
        else torch.float32).eval()


def test_the_folder_holds_gpt2_names_and_a_char_tokenizer(exported):
    model, folder, _ = exported
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["activation_function"] == "gelu_new"
    from safetensors.numpy import load_file

    tensors = load_file(folder / "model.safetensors")
    w = tensors["transformer.h.1.attn.c_attn.weight"]  # Conv1D: (d_in, 3·d_out), no transpose
    assert w.shape == (16, 48)
    assert np.array_equal(w[:, 16:32], model.params["h.1.attn.w_k"])
    assert "lm_head.weight" not in tensors  # tied to wte
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    text = "bad cab\nX a"
    ids = tok(text)["input_ids"]
    assert ids == CharTokenizer(CHARS).encode(text).tolist() and tok.decode(ids) == text


@pytest.mark.parametrize("impl", ["qkv", "eager"])
def test_transformers_gives_qkvs_logits_and_greedy_text(exported, impl):
    model, folder, dtype = exported
    hf = _hf(folder, impl, dtype)
    ids = CharTokenizer(CHARS).encode("cab bad\nabc")
    with torch.no_grad():
        logits = hf(torch.tensor(ids[None])).logits.numpy()
    ours = model(ids[None])
    eps = np.finfo(dtype).eps
    # a few dozen roundings per layer, on logits of size ~|logits|
    bound = 64 * eps * CONFIG.n_layer * max(1.0, float(np.abs(ours).max()))
    assert np.abs(logits - ours).max() <= bound
    if dtype == np.float64:
        with torch.no_grad():
            out = hf.generate(torch.tensor(ids[None]), max_new_tokens=10, do_sample=False,
                              pad_token_id=0)
        steps = watch.generate(model, ids, 10, greedy=True)
        assert out[0, ids.size:].tolist() == [s.char for s in steps]


def test_qkv_look_model_reads_the_folder(tmp_path, capsys):
    folder = export(_model(np.float32), CharTokenizer(CHARS), tmp_path / "gpt")
    assert main(["look", "bad cab", "--model", str(folder), "--all"]) == 0
    out = capsys.readouterr().out
    assert "masked pairs ×" in out and "2 layers × 2 heads" in out

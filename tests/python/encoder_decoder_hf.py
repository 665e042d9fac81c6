"""Shared checks of test_marian_hf.py and test_bart_hf.py: Hugging Face Marian (MarianMTModel, the Opus-MT family) and BART (BartForConditionalGeneration)
directories in attnkit's encoder-decoder, against transformers 4.38.2 (the held-out peer): tiny
random models built and saved by transformers (2 + 2 layers, d_model 32, 4 heads, vocabulary 100;
Marian with scale_embedding, swish, bad_words_ids = [[pad]] and forced_eos_token_id; BART with its
learned positions offset by 2 and layernorm_embedding; both with a non-zero final_logits_bias and
perturbed LayerNorms so that every tensor's place matters).
  - `attnkit encode`: encoder output and decoder logits equal transformers' (1e-4), with padding;
  - `attnkit generate`: greedy and beam search (4 beams, several length penalties, a batch of two
    sources) give transformers' ids, and beam sequence scores within 1e-4;
  - `attnkit convert --format huggingface`: the same tensor names, and transformers loads the copy
    with equal outputs;
  - `attnkit prune` on the HF directory: transformers loads the pruned copy (heads zero-filled) with
    the outputs of the original under the same head masks, and attnkit reads it back pruned;
  - bad configs: a missing or unsupported field is a one-line error naming config.json and the key.

The test files call runner.run_in_peer_venv("transformers") before importing this module; they
set BUILD_DIR from runner.build_dir()."""
import json
import os
import shutil
import subprocess
import tempfile

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import (BartConfig, BartForConditionalGeneration, MarianConfig,  # noqa: E402
                          MarianMTModel)

settings = {"build_dir": "build"}  # the test file sets it from --build-dir
TOLERANCE = 1e-4
VOCAB = 100


def attnkit(*argv):
    p = subprocess.run([os.path.join(settings["build_dir"], "attnkit"), "--threads", "1", *argv],
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def perturb(model, seed):
    """A non-zero final_logits_bias and LayerNorms away from (1, 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape, generator=g) * 0.5)
        for name, p in model.named_parameters():
            if "layer_norm" in name or "layernorm" in name:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)


def make_marian(directory, seed=0):
    config = MarianConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                          decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=VOCAB - 1,
                          decoder_start_token_id=VOCAB - 1, eos_token_id=0, forced_eos_token_id=0,
                          bad_words_ids=[[VOCAB - 1]], scale_embedding=True,
                          activation_function="swish", init_std=0.3, dropout=0.1)
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    perturb(model, seed)
    with torch.no_grad():
        model.final_logits_bias[0, VOCAB - 1] = 8.0  # pad would win but for bad_words_ids
    model.save_pretrained(directory, safe_serialization=True)
    return model


def make_bart(directory, seed=0):
    config = BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                        decoder_ffn_dim=64, max_position_embeddings=64, init_std=0.3)
    torch.manual_seed(seed)
    model = BartForConditionalGeneration(config).eval()
    perturb(model, seed)
    model.save_pretrained(directory, safe_serialization=True)
    return model


def ids_text(ids):
    return " ".join(str(i) for i in ids)


def cut_at_eos(ids, eos):
    out = []
    for t in ids:
        out.append(t)
        if t == eos:
            break
    return out


class EncoderDecoderHf:
    """The checks, for one family (the subclasses say which)."""
    family = None
    make = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.tmp.name, cls.family)
        cls.model = cls.make(cls.dir, seed=3)
        cls.config = cls.model.config
        cls.eos = cls.config.eos_token_id
        # Sources of real tokens (not pad, not EOS), ending with EOS as tokenizers write them.
        cls.sources = [[5, 17, 42, 8, 63, 21, cls.eos], [33, 9, 71, cls.eos]]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def encode(self, directory, source, target, mask=None):
        out = os.path.join(self.tmp.name, "encoded.safetensors")
        argv = ["encode", "--model", directory, "--ids", ids_text(source), "--decoder-ids",
                ids_text(target), "--output", out]
        if mask is not None:
            argv += ["--attention-mask", ids_text(mask)]
        code, _, err = attnkit(*argv)
        self.assertEqual(code, 0, err)
        with safe_open(out, "pt") as f:
            return f.get_tensor("encoder_last_hidden_state"), f.get_tensor("logits")

    def hf_forward(self, model, source, target, mask=None, **masks):
        with torch.no_grad():
            out = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([target]),
                        attention_mask=None if mask is None else torch.tensor([mask]), **masks)
        return out.encoder_last_hidden_state, out.logits

    def assert_close(self, got, want, what):
        self.assertEqual(tuple(got.shape), tuple(want.shape), what)
        self.assertLess((got - want).abs().max().item(), TOLERANCE, what)

    def test_encode_equals_transformers(self):
        target = [self.config.decoder_start_token_id, 7, 19, 3, 55]
        for source, mask in ((self.sources[0], None), (self.sources[1] + [self.config.pad_token_id] * 2,
                                                       [1] * len(self.sources[1]) + [0, 0])):
            want_memory, want_logits = self.hf_forward(self.model, source, target, mask)
            memory, logits = self.encode(self.dir, source, target, mask)
            real = len(source) if mask is None else sum(mask)
            self.assert_close(memory[:, :real], want_memory[:, :real], "encoder output")
            self.assert_close(logits, want_logits, "decoder logits")

    def hf_generate(self, sources, **kwargs):
        width = max(len(s) for s in sources)
        pad = self.config.pad_token_id
        input_ids = torch.tensor([s + [pad] * (width - len(s)) for s in sources])
        mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sources])
        with torch.no_grad():
            out = self.model.generate(input_ids=input_ids, attention_mask=mask, do_sample=False,
                                      output_scores=True, return_dict_in_generate=True, **kwargs)
        results = []
        for i in range(len(sources)):
            ids = cut_at_eos(out.sequences[i, 1:].tolist(), self.eos)  # after the start token
            score = None
            if getattr(out, "sequences_scores", None) is not None:
                score = out.sequences_scores[i].item()
            results.append((ids, score))
        return results

    def attnkit_generate(self, sources, *args):
        argv = ["generate", "--model", self.dir, "--json"]
        for s in sources:
            argv += ["--prompt-ids", ids_text(s)]
        code, out, err = attnkit(*argv, *args)
        self.assertEqual(code, 0, err)
        return [r["sequences"][0] for r in json.loads(out)["results"]]

    def test_generate_greedy(self):
        # A batch of two sources of different lengths (the encoder input right padded); at 4 new
        # tokens forced_eos_token_id decides the last one.
        for sources in (self.sources,):
            for n in (4, 12):
                want = self.hf_generate(sources, max_new_tokens=n, num_beams=1)
                got = self.attnkit_generate(sources, "--max-new-tokens", str(n))
                for (ids, _), g in zip(want, got):
                    self.assertEqual(g["ids"], ids, f"greedy {n} {sources}")

    def test_generate_beam(self):
        for penalty in (1.0, 0.6, 2.0):
            for sources in (self.sources,):
                with self.subTest(length_penalty=penalty, sources=len(sources)):
                    want = self.hf_generate(sources, max_new_tokens=10, num_beams=4,
                                            length_penalty=penalty)
                    got = self.attnkit_generate(sources, "--strategy", "beam", "--beams", "4",
                                                "--length-penalty", str(penalty),
                                                "--max-new-tokens", "10")
                    for (ids, score), g in zip(want, got):
                        self.assertEqual(g["ids"], ids)
                        self.assertAlmostEqual(g["score"], score, delta=TOLERANCE)

    def test_save_loads_in_transformers(self):
        out = os.path.join(self.tmp.name, "converted")
        code, _, err = attnkit("convert", "--from", self.dir, "--to", out, "--format", "huggingface")
        self.assertEqual(code, 0, err)
        with safe_open(os.path.join(self.dir, "model.safetensors"), "pt") as a, \
                safe_open(os.path.join(out, "model.safetensors"), "pt") as b:
            self.assertEqual(sorted(a.keys()), sorted(b.keys()))
            for k in a.keys():
                self.assertTrue(torch.equal(a.get_tensor(k), b.get_tensor(k)), k)
        copy = type(self.model).from_pretrained(out).eval()
        source, target = self.sources[0], [self.config.decoder_start_token_id, 4, 8]
        for got, want in zip(self.hf_forward(copy, source, target), self.hf_forward(self.model, source, target)):
            self.assert_close(got, want, "reloaded")

    def test_attnkit_format_keeps_the_conventions(self):
        # Converted to attnkit's own format (its config records sinusoid-halves or the position
        # offset, the embedding scale, final_logits_bias, the start token), the same outputs.
        out = os.path.join(self.tmp.name, "attnkit-format")
        code, _, err = attnkit("convert", "--from", self.dir, "--to", out)
        self.assertEqual(code, 0, err)
        with open(os.path.join(out, "config.json")) as f:
            config = json.load(f)["encoder_decoder"]
        self.assertTrue(config["final_logits_bias"])
        self.assertEqual(config["decoder_start_token_id"], self.config.decoder_start_token_id)
        source, target = self.sources[0], [self.config.decoder_start_token_id, 6, 30]
        for got, want in zip(self.encode(out, source, target), self.hf_forward(self.model, source, target)):
            self.assert_close(got, want, "attnkit format")

    def test_pruned_heads_round_trip(self):
        heads = {"encoder.self": {"0": [1]}, "decoder.self": {"1": [0, 3]}, "decoder.cross": {"0": [2]}}
        pruned = os.path.join(self.tmp.name, "pruned")
        code, _, err = attnkit("prune", "--model", self.dir, "--heads", json.dumps(heads), "--out", pruned)
        self.assertEqual(code, 0, err)
        with open(os.path.join(pruned, "config.json")) as f:
            config = json.load(f)
        self.assertEqual(config["attnkit_pruned_heads"], heads)
        self.assertNotIn("pruned_heads", config)
        # transformers reads it (full size, removed heads zero) and computes what head masks give.
        masks = {}
        for key, site in (("head_mask", "encoder.self"), ("decoder_head_mask", "decoder.self"),
                          ("cross_attn_head_mask", "decoder.cross")):
            m = torch.ones(2, 4)
            for layer, hs in heads[site].items():
                m[int(layer), hs] = 0
            masks[key] = m
        source, target = self.sources[0], [self.config.decoder_start_token_id, 11, 2, 40]
        want = self.hf_forward(self.model, source, target, **masks)
        copy = type(self.model).from_pretrained(pruned).eval()
        for got, w in zip(self.hf_forward(copy, source, target), want):
            self.assert_close(got, w, "transformers on the pruned directory")
        for got, w in zip(self.encode(pruned, source, target), want):
            self.assert_close(got, w, "attnkit on the pruned directory")
        # attnkit reads it back pruned: a second save writes the same directory.
        again = os.path.join(self.tmp.name, "pruned-again")
        code, _, err = attnkit("convert", "--from", pruned, "--to", again, "--format", "huggingface")
        self.assertEqual(code, 0, err)
        with open(os.path.join(again, "config.json")) as f:
            self.assertEqual(json.load(f)["attnkit_pruned_heads"], heads)
        with safe_open(os.path.join(pruned, "model.safetensors"), "pt") as a, \
                safe_open(os.path.join(again, "model.safetensors"), "pt") as b:
            for k in a.keys():
                self.assertTrue(torch.equal(a.get_tensor(k), b.get_tensor(k)), k)

    def test_bad_config(self):
        for edit, key in ((lambda c: c.pop("d_model"), "d_model"),
                          (lambda c: c.pop("encoder_ffn_dim"), "encoder_ffn_dim"),
                          (lambda c: c.update(activation_function="gelu_fast"), "activation_function"),
                          (lambda c: c.update(normalize_before=True), "normalize_before"),
                          (lambda c: c.update(pruned_heads={"0": [1]}), "pruned_heads")):
            bad = os.path.join(self.tmp.name, "bad-" + key)
            shutil.copytree(self.dir, bad, dirs_exist_ok=True)
            path = os.path.join(bad, "config.json")
            with open(path) as f:
                config = json.load(f)
            edit(config)
            with open(path, "w") as f:
                json.dump(config, f)
            code, _, err = attnkit("encode", "--model", bad, "--ids", "5 6")
            self.assertNotEqual(code, 0, key)
            lines = err.strip().splitlines()
            self.assertEqual(len(lines), 1, err)
            self.assertIn(path, lines[0])
            self.assertIn(key, lines[0])

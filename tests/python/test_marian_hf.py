#!/usr/bin/python3
"""Hugging Face Marian (MarianMTModel, the Opus-MT family) in attnkit's encoder-decoder against
transformers 4.38.2: encode, greedy and beam generate, save, pruned heads and bad configs
(encoder_decoder_hf.py's checks) on a tiny random model with scale_embedding, swish,
bad_words_ids = [[pad]] (the pad token's final_logits_bias makes it the argmax, so the rule is
what keeps it out) and forced_eos_token_id.

ctest runs this file with /usr/bin/python3; it re-runs itself with the test venv's python
(scripts/peer_python.sh)."""
import unittest

import runner

runner.run_in_peer_venv("transformers")

import os  # noqa: E402

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import MarianConfig, MarianMTModel  # noqa: E402

from encoder_decoder_hf import VOCAB, EncoderDecoderHf, attnkit, ids_text, make_marian, settings  # noqa: E402


class MarianHf(EncoderDecoderHf, unittest.TestCase):
    family = "marian"
    make = staticmethod(make_marian)

    def test_pad_is_never_generated(self):
        # bad_words_ids = [[pad]]: the pad token gets -inf, though its logit wins (final_logits_bias).
        self.assertEqual(self.config.bad_words_ids, [[VOCAB - 1]])
        source, target = self.sources[0], [self.config.decoder_start_token_id, 7]
        _, logits = self.hf_forward(self.model, source, target)
        self.assertEqual(logits[0, -1].argmax().item(), VOCAB - 1)
        got = self.attnkit_generate(self.sources, "--max-new-tokens", "12")
        for g in got:
            self.assertNotIn(VOCAB - 1, g["ids"])

    def test_unshared_embeddings(self):
        # share_encoder_decoder_embeddings = false: encoder and decoder tables of their own and
        # an untied LM head (the form attnkit reads; the tied one is refused by key).
        config = MarianConfig(vocab_size=50, decoder_vocab_size=50, share_encoder_decoder_embeddings=False,
                              tie_word_embeddings=False, d_model=16, encoder_layers=1, decoder_layers=1,
                              encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                              decoder_ffn_dim=32, max_position_embeddings=32, pad_token_id=49,
                              decoder_start_token_id=49, eos_token_id=0, scale_embedding=True, init_std=0.3)
        torch.manual_seed(1)
        model = MarianMTModel(config).eval()
        directory = os.path.join(self.tmp.name, "unshared")
        model.save_pretrained(directory, safe_serialization=True)
        source, target = [3, 45, 7, 0], [49, 5, 38]
        memory, logits = self.encode(directory, source, target)
        want_memory, want_logits = self.hf_forward(model, source, target)
        self.assert_close(memory, want_memory, "encoder output")
        self.assert_close(logits, want_logits, "logits")
        copy = os.path.join(self.tmp.name, "unshared-copy")
        code, _, err = attnkit("convert", "--from", directory, "--to", copy, "--format", "huggingface")
        self.assertEqual(code, 0, err)
        with safe_open(os.path.join(directory, "model.safetensors"), "pt") as a, \
                safe_open(os.path.join(copy, "model.safetensors"), "pt") as b:
            self.assertEqual(sorted(a.keys()), sorted(b.keys()))
            for k in a.keys():
                self.assertTrue(torch.equal(a.get_tensor(k), b.get_tensor(k)), k)
        config.tie_word_embeddings = True
        tied = os.path.join(self.tmp.name, "unshared-tied")
        MarianMTModel(config).save_pretrained(tied, safe_serialization=True)
        code, _, err = attnkit("encode", "--model", tied, "--ids", ids_text(source))
        self.assertEqual(code, 2, err)
        self.assertIn("tie_word_embeddings", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)


if __name__ == "__main__":
    settings["build_dir"] = runner.build_dir()
    runner.run()

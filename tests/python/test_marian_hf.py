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

from encoder_decoder_hf import VOCAB, EncoderDecoderHf, make_marian, settings  # noqa: E402


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


if __name__ == "__main__":
    settings["build_dir"] = runner.build_dir()
    runner.run()

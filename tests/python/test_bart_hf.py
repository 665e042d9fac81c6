#!/usr/bin/python3
"""Hugging Face BART (BartForConditionalGeneration) in attnkit's encoder-decoder against
transformers 4.38.2: encode, greedy and beam generate, save, pruned heads and bad configs
(encoder_decoder_hf.py's checks) on a tiny random model with BART's learned positions offset by 2,
layernorm_embedding, decoder start </s> and forced_eos_token_id.

ctest runs this file with /usr/bin/python3; it re-runs itself with the test venv's python
(scripts/peer_python.sh)."""
import unittest

import runner

runner.run_in_peer_venv("transformers")

from encoder_decoder_hf import EncoderDecoderHf, make_bart, settings  # noqa: E402


class BartHf(EncoderDecoderHf, unittest.TestCase):
    family = "bart"
    make = staticmethod(make_bart)


if __name__ == "__main__":
    settings["build_dir"] = runner.build_dir()
    runner.run()

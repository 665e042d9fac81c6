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

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402

from encoder_decoder_hf import EncoderDecoderHf, attnkit, ids_text, make_bart, settings  # noqa: E402


class BartHf(EncoderDecoderHf, unittest.TestCase):
    family = "bart"
    make = staticmethod(make_bart)

    def test_forced_bos(self):
        # bart-large-cnn's forced_bos_token_id (here <s> = 0), from generation_config.json.
        directory = os.path.join(self.tmp.name, "forced-bos")
        shutil.copytree(self.dir, directory)
        path = os.path.join(directory, "generation_config.json")
        with open(path) as f:
            generation = json.load(f)
        generation["forced_bos_token_id"] = 0
        with open(path, "w") as f:
            json.dump(generation, f)
        want = self.hf_generate(self.sources, max_new_tokens=6, num_beams=1, forced_bos_token_id=0)
        argv = ["generate", "--model", directory, "--json", "--max-new-tokens", "6"]
        for s in self.sources:
            argv += ["--prompt-ids", ids_text(s)]
        code, out, err = attnkit(*argv)
        self.assertEqual(code, 0, err)
        for (ids, _), r in zip(want, json.loads(out)["results"]):
            self.assertEqual(ids[0], 0)
            self.assertEqual(r["sequences"][0]["ids"], ids)


if __name__ == "__main__":
    settings["build_dir"] = runner.build_dir()
    runner.run()

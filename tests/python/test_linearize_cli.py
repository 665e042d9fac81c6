#!/usr/bin/python3
"""attnkit linearize end to end (issue 45): a tiny softmax GPT-2 language model trained here by
`attnkit train` on a generated corpus (lines whose second half repeats the first) is linearized to
linear:hedgehog with attention transfer (stage 1) and to cosformer (measured only); transfer.json's
held-out losses of the trained maps end below the first logged ones; the saved student's cached
greedy decoding (`generate --json`) equals its full forward (`encode --output` logits: argmax
and summed log-probabilities); after `train --init STUDENT` for S steps (stage 2) its validation
loss is below that of the same architecture trained from scratch for the same S steps, with
margin, with every weight trained and with LoRA adapters alone (`--lora.rank`: the student's
tensors unchanged in the checkpoint, a resumed run ending where the straight one does, the
checkpoint converting to a merged plain model); bad arguments are one-line errors. Deterministic seeds, one thread."""
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

import runner  # noqa: E402

runner.run_in_peer_venv("transformers")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

BUILD_DIR = "build"
WORDS = ["good", "great", "bad", "awful", "movie", "the", "a", "plot", "actor", "fine", "film", "was"]
SIZES = ["--model.family", "gpt2", "--model.hidden", "32", "--model.layers", "2", "--model.heads", "4",
         "--model.dropout", "0"]
STAGE2_STEPS = 60


def attnkit(*argv):
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", "--seed", "1", *argv],
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def write_text(path, count, seed):
    """Lines of 4 random words and the same 4 again: the second half needs attention."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            words = [rng.choice(WORDS) for _ in range(4)]
            f.write(" ".join(words + words) + "\n")


def write_vocab(directory):
    path = os.path.join(directory, "vocab.txt")
    with open(path, "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS) + "\n")
    return path


def lm_run(run_dir, data, vocab, steps, *model):
    """`train --task.name lm` for `steps` steps, one evaluation at the end."""
    return attnkit("train", "--task.name", "lm", "--task.data", data, "--task.tokenizer", vocab,
                   "--task.truncate", "32", "--task.batch_size", "16", "--run.steps", str(steps),
                   "--run.eval_every", str(steps), "--run.checkpoint_every", str(steps),
                   "--run.dir", run_dir, "--optimizer.lr", "3e-3", "--run.seed", "1", *model)


def last_eval_loss(run_dir):
    loss = None
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            entry = json.loads(line)
            if "eval" in entry:
                loss = entry["eval"]["loss"]
    return loss


class LinearizeCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.tmp.name
        cls.vocab = write_vocab(d)
        cls.train_txt = os.path.join(d, "train.txt")
        write_text(cls.train_txt, 600, 1)
        cls.teacher = os.path.join(d, "teacher")
        cls.teacher_rc, _, cls.teacher_err = lm_run(cls.teacher, cls.train_txt, cls.vocab, 300, *SIZES)
        cls.students = {}
        for kind in ("linear:hedgehog", "cosformer"):
            out = os.path.join(d, kind.replace(":", "-"))
            cls.students[kind] = (out, attnkit("linearize", "--model", cls.teacher, "--kind", kind,
                                               "--data", cls.train_txt, "--max-length", "32",
                                               "--steps", "150", "--log-every", "25", "--out", out))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def student(self, kind):
        self.assertEqual(self.teacher_rc, 0, self.teacher_err)
        out, (rc, stdout, err) = self.students[kind]
        self.assertEqual(rc, 0, err)
        with open(os.path.join(out, "transfer.json")) as f:
            return out, stdout, json.load(f)

    def test_transfer_lowers_the_hedgehog_losses(self):
        out, stdout, j = self.student("linear:hedgehog")
        self.assertTrue(j["trained"])
        self.assertEqual(j["kind"], "linear:hedgehog")
        self.assertEqual([(l["site"], l["layer"]) for l in j["layers"]], [("decoder.self", 0), ("decoder.self", 1)])
        for layer in j["layers"]:
            self.assertEqual([p["step"] for p in layer["curve"]], [1, 25, 50, 75, 100, 125, 150])
            first = layer["curve"][0]["loss"]
            self.assertLess(layer["final"], 0.7 * first, layer)
            self.assertLess(layer["final"], 0.7 * layer["initial"], layer)
        self.assertEqual(sum(1 for line in stdout.splitlines() if line.startswith("step ")), 7)
        with open(os.path.join(out, "config.json")) as f:
            config = json.load(f)
        self.assertEqual(config["model"]["attention"]["kind"], "softmax")
        self.assertEqual({k: v["kind"] for k, v in config["model"]["layer_attention_specs"].items()},
                         {"0": "linear:hedgehog", "1": "linear:hedgehog"})
        self.assertTrue(os.path.isfile(os.path.join(out, "tokenizer.json")))

    def test_cosformer_is_measured_only(self):
        _, stdout, j = self.student("cosformer")
        self.assertFalse(j["trained"])
        self.assertIn("stage 1 skipped", stdout)
        for layer in j["layers"]:
            self.assertEqual(layer["curve"], [])
            self.assertGreater(layer["initial"], 0.0)
            self.assertEqual(layer["initial"], layer["final"])

    def test_cached_generation_equals_the_full_forward(self):
        for kind in ("linear:hedgehog", "cosformer"):
            out, _, _ = self.student(kind)
            prompt = [5 + WORDS.index(w) for w in ("the", "plot", "was", "fine", "the")]
            rc, stdout, err = attnkit("generate", "--model", out, "--prompt-ids", " ".join(map(str, prompt)),
                                      "--max-new-tokens", "10", "--no-eos", "--json")
            self.assertEqual(rc, 0, err)
            seq = json.loads(stdout)["results"][0]["sequences"][0]
            ids = seq["ids"]
            self.assertEqual(len(ids), 10)
            logits_file = os.path.join(self.tmp.name, kind.replace(":", "-") + "-logits.safetensors")
            rc, _, err = attnkit("encode", "--model", out, "--ids", " ".join(map(str, prompt + ids)),
                                 "--output", logits_file)
            self.assertEqual(rc, 0, err)
            logits = load_file(logits_file)["logits"][0].double()
            steps = logits[len(prompt) - 1:len(prompt) - 1 + len(ids)]
            self.assertEqual(steps.argmax(-1).tolist(), ids, kind)
            log_p = torch.log_softmax(steps, -1).gather(1, torch.tensor(ids).unsqueeze(1)).sum().item()
            self.assertAlmostEqual(seq["score"], log_p, delta=1e-3)

    def test_stage_two_beats_training_from_scratch(self):
        out, _, _ = self.student("linear:hedgehog")
        d = self.tmp.name
        rc, _, err = lm_run(os.path.join(d, "stage2"), self.train_txt, self.vocab, STAGE2_STEPS, "--init", out)
        self.assertEqual(rc, 0, err)
        self.assertIn("new: none", err)
        rc, _, err = lm_run(os.path.join(d, "scratch"), self.train_txt, self.vocab, STAGE2_STEPS, *SIZES,
                            "--model.attention", "linear:hedgehog")
        self.assertEqual(rc, 0, err)
        linearized, scratch = last_eval_loss(os.path.join(d, "stage2")), last_eval_loss(os.path.join(d, "scratch"))
        teacher = last_eval_loss(self.teacher)
        print(f"validation loss after {STAGE2_STEPS} steps: linearized {linearized:.4f}, from scratch "
              f"{scratch:.4f} (softmax teacher after 300: {teacher:.4f})", flush=True)
        self.assertLess(linearized, scratch - 0.3)

    def test_stage_two_low_rank_trains_the_adapters_alone_and_resumes(self):
        """train --init STUDENT --lora.rank 4: only the adapters change (every tensor of the student is
        in the checkpoint unchanged), the validation loss still ends far below training from scratch,
        a run resumed half-way ends where the straight run does, and the checkpoint loads elsewhere
        as a plain (merged) model."""
        out, _, _ = self.student("linear:hedgehog")
        d = self.tmp.name
        # A constant rate: the half run's schedule must not depend on its own run.steps.
        lora = ("--init", out, "--lora.rank", "4", "--lora.alpha", "8", "--schedule.kind", "constant")
        straight = os.path.join(d, "lora")
        rc, _, err = lm_run(straight, self.train_txt, self.vocab, STAGE2_STEPS, *lora)
        self.assertEqual(rc, 0, err)
        self.assertIn("lora: 8 adapters of rank 4", err)  # 2 layers x q, k, v, o
        checkpoint = os.path.join(straight, "checkpoints", sorted(os.listdir(os.path.join(straight, "checkpoints")))[-1])
        trained = load_file(os.path.join(checkpoint, "model.safetensors"))
        student = load_file(os.path.join(out, "model.safetensors"))
        self.assertEqual(sum(name.endswith("_lora_a") for name in trained), 8)
        for name, tensor in student.items():
            self.assertTrue(torch.equal(trained[name], tensor), name)
        self.assertGreater(max(t.abs().max().item() for n, t in trained.items() if n.endswith("_lora_b")), 0)
        loss = last_eval_loss(straight)
        rc, _, err = lm_run(os.path.join(d, "scratch-lora"), self.train_txt, self.vocab, STAGE2_STEPS, *SIZES,
                            "--model.attention", "linear:hedgehog")
        self.assertEqual(rc, 0, err)
        scratch = last_eval_loss(os.path.join(d, "scratch-lora"))
        print(f"LoRA rank 4, {STAGE2_STEPS} steps: validation loss {loss:.4f} (from scratch {scratch:.4f})", flush=True)
        self.assertLess(loss, scratch - 0.3)
        # Half the steps, then --resume to the end: the same validation loss.
        half = os.path.join(d, "lora-half")
        rc, _, err = attnkit("train", "--task.name", "lm", "--task.data", self.train_txt, "--task.tokenizer", self.vocab,
                             "--task.truncate", "32", "--task.batch_size", "16", "--run.steps", str(STAGE2_STEPS // 2),
                             "--run.eval_every", str(STAGE2_STEPS), "--run.checkpoint_every", str(STAGE2_STEPS // 2),
                             "--run.dir", half, "--optimizer.lr", "3e-3", "--run.seed", "1", *lora)
        self.assertEqual(rc, 0, err)
        rc, _, err = attnkit("train", "--resume", half, "--run.steps", str(STAGE2_STEPS))
        self.assertEqual(rc, 0, err)
        self.assertAlmostEqual(last_eval_loss(half), loss, delta=1e-6)
        # Elsewhere the checkpoint is a plain model: convert writes no adapter.
        merged = os.path.join(d, "lora-merged")
        rc, _, err = attnkit("convert", "--from", checkpoint, "--to", merged)
        self.assertEqual(rc, 0, err)
        self.assertFalse([n for n in load_file(os.path.join(merged, "model.safetensors")) if "lora" in n])

    def test_stage_two_of_a_llama_family_student(self):
        """A Llama-shaped model (rotary positions, grouped key/value heads; transformers' LlamaForCausalLM
        at random init, the tiny vocabulary) linearized to linear:hedgehog: stage 2 (`train --init`,
        the lm task's full blocks) trains it, though linear attention with rotary positions takes no
        key padding, and its validation loss falls."""
        from transformers import LlamaConfig, LlamaForCausalLM
        d = self.tmp.name
        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=len(WORDS) + 5, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                             pad_token_id=0, bos_token_id=2, eos_token_id=3)
        llama = os.path.join(d, "llama")
        LlamaForCausalLM(config).save_pretrained(llama, safe_serialization=True)
        out = os.path.join(d, "llama-hedgehog")
        rc, _, err = attnkit("linearize", "--model", llama, "--kind", "linear:hedgehog", "--data", self.train_txt,
                             "--tokenizer", self.vocab, "--max-length", "32", "--steps", "10", "--out", out)
        self.assertEqual(rc, 0, err)
        run = os.path.join(d, "llama-stage2")
        rc, _, err = attnkit("train", "--init", out, "--task.name", "lm", "--task.data", self.train_txt,
                             "--task.tokenizer", self.vocab, "--task.truncate", "32", "--task.batch_size", "16",
                             "--run.steps", "40", "--run.eval_every", "20", "--run.checkpoint_every", "40",
                             "--run.dir", run, "--optimizer.lr", "3e-3", "--run.seed", "1")
        self.assertEqual(rc, 0, err)
        self.assertIn("new: none", err)
        with open(os.path.join(run, "metrics.jsonl")) as f:
            losses = [json.loads(line)["eval"]["loss"] for line in f if '"eval"' in line]
        self.assertEqual(len(losses), 2)
        self.assertLess(losses[1], losses[0])

    def test_keep_softmax_by_analyze_heads_importance(self):
        """analyze heads --out writes heads.json; --keep-softmax 1 keeps the layer of the larger summed
        importance as softmax and converts the other."""
        self.assertEqual(self.teacher_rc, 0, self.teacher_err)
        d = self.tmp.name
        val = os.path.join(d, "val.txt")
        write_text(val, 60, 2)
        heads = os.path.join(d, "heads")
        rc, _, err = attnkit("analyze", "heads", "--model", self.teacher, "--data", val, "--max-length", "32",
                             "--no-ablation", "--fractions", "50", "--random-orders", "1", "--out", heads)
        self.assertEqual(rc, 0, err)
        with open(os.path.join(heads, "heads.json")) as f:
            sums = [sum(row) for row in json.load(f)["importance"]["importance"]]
        self.assertEqual(len(sums), 2)
        out = os.path.join(d, "keep1")
        rc, _, err = attnkit("linearize", "--model", self.teacher, "--kind", "linear:t2r", "--data", self.train_txt,
                             "--max-length", "32", "--steps", "5", "--keep-softmax", "1", "--importance",
                             os.path.join(heads, "heads.json"), "--out", out)
        self.assertEqual(rc, 0, err)
        with open(os.path.join(out, "config.json")) as f:
            specs = json.load(f)["model"]["layer_attention_specs"]
        converted = 0 if sums[0] < sums[1] else 1
        self.assertEqual({k: v["kind"] for k, v in specs.items()}, {str(converted): "linear:t2r"})

    def test_bad_arguments_are_one_line_errors(self):
        self.assertEqual(self.teacher_rc, 0, self.teacher_err)
        out = os.path.join(self.tmp.name, "bad")
        for argv in (["--kind", "softmax"], ["--kind", "linear:nope"], ["--kind", "cosformer", "--sites", "decoder.cross"],
                     ["--kind", "cosformer", "--layers", "2"], ["--kind", "cosformer", "--keep-softmax", "1"],
                     ["--kind", "cosformer", "--data", os.path.join(self.tmp.name, "missing.txt")]):
            if "--data" not in argv:
                argv = argv + ["--data", self.train_txt]
            rc, _, err = attnkit("linearize", "--model", self.teacher, "--out", out, *argv)
            self.assertNotEqual(rc, 0, argv)
            self.assertEqual(len(err.strip().splitlines()), 1, (argv, err))
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()

"""The peer of `attnkit_bench_train --model mlm` (bench/mlm_compare.py): one masked-LM training
step of transformers' BertForMaskedLM on PyTorch 2.x — forward with labels (the loss over the
selected positions; the head runs on every position, as BertForMaskedLM does), backward, AdamW
(lr 1e-4, weight decay 0.01 on matrices, as attnkit's make_optimizer). The same model as the
attnkit side: BERT (post-LN, exact gelu, two token types), no pooler, positions max(512, n),
dropout 0, attn_implementation "sdpa", float32, no padding (no attention mask); the selected
positions are the same fixed 15% ((b·n + i) mod 20 < 3), their labels the input ids. Random token
ids, fixed per step. One JSON line with the fields of attnkit_bench_train.

    ~/.cache/attnkit/venv-py/bin/python bench/peers/mlm_peer.py --n 128 --batch 8 --threads 2
"""
import argparse
import json
import resource

import torch
from transformers import BertConfig, BertForMaskedLM

from train_peer import adamw, current_rss_mib, timed_steps


def main():
    p = argparse.ArgumentParser()
    for name, default in (("n", 128), ("batch", 8), ("hidden", 768), ("layers", 12), ("heads", 12),
                          ("intermediate", 3072), ("vocab", 30522), ("steps", 3), ("warmup", 1), ("threads", 2)):
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
                        num_attention_heads=a.heads, intermediate_size=a.intermediate, hidden_act="gelu",
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        max_position_embeddings=max(512, a.n), type_vocab_size=2)
    model = BertForMaskedLM._from_config(config, attn_implementation="sdpa")
    assert model.config._attn_implementation == "sdpa", model.config._attn_implementation
    model.train()
    opt = adamw(model)
    ids = torch.randint(a.vocab, (a.batch, a.n))
    selected = (torch.arange(a.batch * a.n) % 20 < 3).view(a.batch, a.n)
    labels = torch.where(selected, ids, torch.full_like(ids, -100))
    baseline = current_rss_mib()

    def step():
        opt.zero_grad()
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        return loss.item()

    seconds, cpu, loss = timed_steps(step, a.warmup, a.steps)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    import transformers
    print(json.dumps({"impl": "transformers", "kind": "softmax (sdpa)", "model": "mlm", "n": a.n, "batch": a.batch,
                      "steps": a.steps, "step_ms": 1000 * seconds / a.steps, "step_cpu_ms": 1000 * cpu / a.steps,
                      "tokens_per_s": a.batch * a.n * a.steps / seconds, "extra_peak_mib": peak - baseline,
                      "loss": loss, "parameters": sum(t.numel() for t in model.parameters()), "threads": torch.get_num_threads(), "torch": torch.__version__,
                      "transformers": transformers.__version__}))


if __name__ == "__main__":
    main()

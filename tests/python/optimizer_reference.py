#!/usr/bin/python3
"""Peer values for tests/train/optimizers_test.cpp: torch.optim (python3-torch) on fixed float64
tensors. Prints one JSON object {config: {parameter: [values...]}} after 5 steps.

Parameters: dense.weight (3x4, decays), dense.bias and norm.weight (1-D, no decay). Loss of step i:
sum over parameters of sum(sin(p) * c_p) with c_p = linspace(-1, 1, numel) reshaped, so the
gradient is cos(p) * c_p. Learning rate of step i (0-based): 0.1 * (i + 1) / 5.
"""
import json

import torch


def parameters():
    return {
        "dense.weight": torch.linspace(-0.5, 0.7, 12, dtype=torch.float64).reshape(3, 4),
        "dense.bias": torch.linspace(0.1, -0.3, 4, dtype=torch.float64),
        "norm.weight": torch.linspace(0.9, 1.1, 4, dtype=torch.float64),
    }


def run(make):
    params = {name: p.clone().requires_grad_(True) for name, p in parameters().items()}
    decay = [params["dense.weight"]]
    no_decay = [params["dense.bias"], params["norm.weight"]]
    optimizer = make([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}])
    for step in range(5):
        for group in optimizer.param_groups:
            group["lr"] = 0.1 * (step + 1) / 5
        optimizer.zero_grad()
        loss = sum((torch.sin(p) * torch.linspace(-1, 1, p.numel(), dtype=torch.float64).reshape(p.shape)).sum()
                   for p in params.values())
        loss.backward()
        optimizer.step()
    return {name: p.detach().reshape(-1).tolist() for name, p in params.items()}


CONFIGS = {
    "adamw": lambda groups: torch.optim.AdamW(groups, lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1),
    "adam": lambda groups: torch.optim.Adam(groups, lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1),
    "sgd": lambda groups: torch.optim.SGD(groups, lr=0.1, momentum=0.9, weight_decay=0.1),
    "sgd-nesterov": lambda groups: torch.optim.SGD(groups, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1),
}

if __name__ == "__main__":
    print(json.dumps({name: run(make) for name, make in CONFIGS.items()}))

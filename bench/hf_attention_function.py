"""The attention function alone, as transformers calls it: attnkit's `attnkit_attention_forward`
against transformers' `sdpa_attention_forward` (docs/python.md, "Strided inputs").

    ~/.cache/attnkit/venv-py/bin/python bench/hf_attention_function.py [--threads 2] [--n 1024]
        [--causal] [--repeats 11]

q, k, v are what transformers hands over: [1, H, n, d] views (view + transpose) of one
[1, n, 3·H·d] projection output, 12 heads, d 64 (GPT-2 small / BERT-base). Forward under
torch.inference_mode(), and forward + backward (torch.autograd.grad to the projection output).
Median of --repeats calls per side after one warm-up, alternating which side runs first; ratio =
sdpa / attnkit (> 1: attnkit faster).

--kernel instead times attnkit's ops alone (torch.ops.attnkit.flash_attention and
flash_attention_backward) on those views against the same ops on contiguous copies of them: what
reading transformers' layout in place costs inside the kernel.
"""
import argparse
import statistics
import sys
import time

import torch

try:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    import attnkit
    import attnkit.transformers as hf
except ImportError as error:  # pragma: no cover - depends on the environment
    sys.exit(f"hf_attention_function.py: {error} (run with the venv of "
             "scripts/python_package_venv.sh after `pip install .`)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--kernel", action="store_true",
                        help="attnkit's ops on the views against contiguous copies")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    B, H, d, n = 1, args.heads, 64, args.n
    torch.manual_seed(0)
    x = torch.randn(B, n, 3 * H * d, requires_grad=True)
    q, k, v = (t.view(B, n, H, d).transpose(1, 2) for t in x.split(H * d, dim=2))
    module = torch.nn.Module()
    module.is_causal = args.causal
    fns = {"sdpa": lambda: sdpa_attention_forward(module, q, k, v, None,
                                                  is_causal=args.causal)[0],
           "attnkit": lambda: hf.attnkit_attention_forward(module, q, k, v, None,
                                                           is_causal=args.causal)[0]}
    g = torch.randn(B, n, H, d)
    if args.kernel:
        return kernel_only(args, [t.detach() for t in (q, k, v)], g.transpose(1, 2), d)

    def forward(fn):
        with torch.inference_mode():
            fn()

    def forward_backward(fn):
        torch.autograd.grad(fn(), (x,), g)

    header(args, n, H, d)
    for mode, run in (("forward", forward), ("forward+backward", forward_backward)):
        med = medians({name: (lambda fn=fn: run(fn)) for name, fn in fns.items()}, args.repeats)
        print(f"{mode}: sdpa {med['sdpa']:.1f} ms, attnkit {med['attnkit']:.1f} ms, "
              f"sdpa / attnkit {med['sdpa'] / med['attnkit']:.2f}x", flush=True)
    return 0


def header(args, n, H, d):
    print(f"torch {torch.__version__}, attnkit from {attnkit.__file__}, threads "
          f"{torch.get_num_threads()}, n {n}, heads {H}, d {d}, causal {args.causal}")


def medians(fns, repeats):
    """Median ms per callable; round 0 is a warm-up; the order alternates between rounds."""
    samples = {name: [] for name in fns}
    for r in range(repeats + 1):
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            start = time.perf_counter()
            fns[name]()
            if r:
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) * 1e3 for name, s in samples.items()}


def kernel_only(args, views, grad_views, d):
    ops = torch.ops.attnkit
    header(args, views[0].shape[2], views[0].shape[1], d)
    scale = d ** -0.5
    layouts = {"views": (views, grad_views),
               "contiguous": ([t.contiguous() for t in views], grad_views.contiguous())}
    calls = {}
    for name, (qkv, grad) in layouts.items():
        out, lse = ops.flash_attention(*qkv, None, args.causal, scale, 0.0, 0)
        calls[name] = (
            lambda qkv=qkv: ops.flash_attention(*qkv, None, args.causal, scale, 0.0, 0),
            lambda qkv=qkv, grad=grad, out=out, lse=lse: ops.flash_attention_backward(
                grad, *qkv, out, lse, None, args.causal, scale, 0.0, 0))
    for i, mode in enumerate(("forward op", "backward op")):
        med = medians({name: fns[i] for name, fns in calls.items()}, args.repeats)
        print(f"{mode}: views {med['views']:.1f} ms, contiguous {med['contiguous']:.1f} ms, "
              f"views / contiguous {med['views'] / med['contiguous']:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

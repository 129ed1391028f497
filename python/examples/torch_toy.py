"""A toy model whose linear layers run gputune's tuned executions.

    python3 torch_toy.py [ENDPOINT]

On a CUDA device with bf16 weights each layer's key is looked up (and, with
tune_misses, tuned by the daemon in the background); elsewhere the layers
run torch's linear, so the output is the same either way.
"""

import sys

import torch

import gputune
import gputune.torch as gt


def main() -> None:
    client = gputune.Client(sys.argv[1] if len(sys.argv) > 1 else None)
    op = gt.TunedDense(client, tune_misses=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096, bias=False),
        torch.nn.GELU(),
        torch.nn.Linear(4096, 1024, bias=False),
    ).to(device=device, dtype=dtype)
    x = torch.randn(4, 1024, device=device, dtype=dtype)
    with torch.no_grad():
        reference = model(x)
        swapped = gt.swap_linears(model, op)
        y = model(x)
    diff = (y.float() - reference.float()).abs().max().item()
    print(f"swapped {swapped} linear layers on {device}; max |diff| vs torch: {diff:.4g}")
    for role in ("0", "2"):
        shape = (4, 1024, 4096) if role == "0" else (4, 4096, 1024)
        key = op.key(role, *shape)
        print(f"{key}: {client.lookup(key).state.name}")


if __name__ == "__main__":
    main()

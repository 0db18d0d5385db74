"""The straightforward formulation of the surrogate's training: the executable spec.

The torch-geometric network (``network.network``) trained by torch autograd exactly as
upstream's ``train_with_early_stopping``: per epoch one forward pass over the disjoint union
of the graphs (``GATv2Conv`` with its own self loops and scatter softmax), ``backward``, torch's
Adam (L2 weight decay), ``ReduceLROnPlateau`` on the training loss, early stopping, the best
epoch's weights restored. This is how MASPOB version 2 trained; it is kept as the formulation
the fast trainer (``optimizers.maspob.fast_gat``) is proven against (same loss trajectory and
predictions, ``tests/optimizers/test_maspob.py``) and timed against
(``benchmarks/perf/maspob_speed.py``), and it trains the deeper networks (``gnn_layers > 1``)
that the fast trainer does not cover.

``masks``: with a ``fast_gat.DropoutMasks`` the three dropouts multiply by that stream's masks
(the fast trainer's), so both formulations can be compared draw for draw; without, torch's own
dropout draws them (version 2's stream).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from optimizers.maspob.graph import TeamGraph
from optimizers.maspob.network import network


@contextlib.contextmanager
def deterministic_cpu() -> Iterator[Any]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one reduction order, whatever the machine
    try:
        yield torch
    finally:
        torch.set_num_threads(threads)


def union_batch(graph: TeamGraph, nodes: np.ndarray) -> tuple[Any, Any, Any, int]:
    """The graphs as one disjoint union (graph-major rows), as torch-geometric batches them."""
    import torch

    graphs, k, width = nodes.shape
    x = torch.as_tensor(np.asarray(nodes, dtype=np.float32).reshape(graphs * k, width))
    base = torch.as_tensor(graph.edges, dtype=torch.long).reshape(-1, 2).T  # (2, E)
    offsets = (torch.arange(graphs, dtype=torch.long) * k).repeat_interleave(base.shape[1])
    edge_index = base.repeat(1, graphs) + offsets
    batch = torch.arange(graphs, dtype=torch.long).repeat_interleave(k)
    return x, edge_index, batch, graphs


class _Masked:
    """Installs a mask stream's draws in place of the network's three dropouts, per epoch."""

    def __init__(self, model: Any, masks: Any, graph: TeamGraph, graphs: int) -> None:
        import torch
        from torch import nn

        from optimizers.maspob.fast_gat import Layout

        self.torch, self.masks = torch, masks
        self.layout = Layout.of(graph)
        self.graphs = graphs
        self.model = model
        conv = model.convs[0]
        self.current: dict[str, Any] = {}
        outer = self

        class Multiply(nn.Module):
            def __init__(self, key: str) -> None:
                super().__init__()
                self.key = key

            def forward(self, x: Any) -> Any:
                return x * outer.current[self.key] if self.training else x

        model.encoder[2] = Multiply("encoder")
        model.head[2] = Multiply("head")
        conv.dropout = 0.0  # attention dropout: multiplied in after the softmax instead
        plain = conv.edge_update

        def edge_update(*args: Any, **kwargs: Any) -> Any:
            alpha = plain(*args, **kwargs)
            return alpha * outer.current["attention"] if conv.training else alpha

        conv.edge_update = edge_update

    def draw(self) -> None:
        lay, g = self.layout, self.graphs
        k = lay.nodes
        enc, att, head = self.masks.draw(((k, g, self.model.encoder[3].in_features), (lay.edges, g, att_heads(self.model)),
                                          (g, self.model.head[3].in_features)))
        # The fast layout is node-major and per-graph-edge; torch-geometric's is graph-major with
        # the team edges of every graph first, then every node's self loop.
        team = lay.edges - k
        heads = att.shape[2]
        attention = np.concatenate([att[:team].transpose(1, 0, 2).reshape(g * team, heads),
                                    att[team:].transpose(1, 0, 2).reshape(g * k, heads)])
        t = self.torch
        self.current = {"encoder": t.from_numpy(np.ascontiguousarray(enc.transpose(1, 0, 2).reshape(g * k, -1))),
                        "attention": t.from_numpy(np.ascontiguousarray(attention)),
                        "head": t.from_numpy(np.ascontiguousarray(head))}


def att_heads(model: Any) -> int:
    return int(model.convs[0].heads)


@dataclass(frozen=True, slots=True)
class AutogradFit:
    model: Any
    epochs: int
    best_loss: float
    losses: tuple[float, ...]
    seconds: float


def fit(graph: TeamGraph, nodes: np.ndarray, targets: np.ndarray, settings: Any, *, seed: int,
        masks: Any = None) -> AutogradFit:
    started = time.monotonic()
    s = settings
    with deterministic_cpu() as torch:
        torch.manual_seed(seed)
        model = network(nodes.shape[2], s)
        x, edge_index, batch, graphs = union_batch(graph, nodes)
        masked = _Masked(model, masks, graph, graphs) if masks is not None else None
        optimizer = torch.optim.Adam(model.parameters(), lr=s.lr, weight_decay=s.weight_decay, foreach=True)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="min", factor=s.plateau_factor, patience=s.plateau_patience, min_lr=s.min_lr)
        y = torch.as_tensor(np.asarray(targets), dtype=torch.float32)
        best_loss, best_state, since_best, epoch = float("inf"), None, 0, 0
        losses: list[float] = []
        model.train()
        for epoch in range(1, s.max_epochs + 1):
            if masked is not None:
                masked.draw()
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x, edge_index, batch, graphs), y)
            loss.backward()
            optimizer.step()
            value = float(loss.detach())
            losses.append(value)
            plateau.step(value)
            if value < best_loss - s.min_delta:
                best_loss, since_best = value, 0
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            else:
                since_best += 1
                if since_best >= s.patience:
                    break
        if best_state is not None:
            model.load_state_dict(best_state)
        model.eval()
    return AutogradFit(model, epoch, best_loss, tuple(losses), time.monotonic() - started)


def predict(model: Any, graph: TeamGraph, nodes: np.ndarray) -> np.ndarray:
    with deterministic_cpu() as torch, torch.no_grad():
        x, edge_index, batch, graphs = union_batch(graph, nodes)
        return model(x, edge_index, batch, graphs).double().numpy()

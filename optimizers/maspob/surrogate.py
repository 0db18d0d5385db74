"""The graph neural surrogate: a GATv2 over the team graph predicting a combination's score.

Node features are the chosen prompts' embeddings; ``layers`` GATv2 layers (torch-geometric's
``GATv2Conv``, ``heads`` attention heads, over the team's edges plus self loops) with ELU and dropout, a mean over the
nodes, a linear head and a sigmoid (scores lie in [0, 1]). Trained from scratch on every pull so
far with Adam on the mean squared error, full batch, for at most ``max_epochs`` epochs with early
stopping after ``patience`` epochs without a lower training loss; the best weights are kept.

Everything runs on the CPU, single-threaded and seeded, so the same pulls and seed give the same
predictions in every process; the network is never saved (a resumed job retrains it).
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


@dataclass(frozen=True, slots=True)
class GNNSettings:
    hidden: int = 32
    layers: int = 1
    heads: int = 4
    dropout: float = 0.05
    lr: float = 5e-3
    weight_decay: float = 1e-5
    max_epochs: int = 800
    patience: int = 200


@dataclass(frozen=True, slots=True)
class FitReport:
    epochs: int
    loss: float
    seconds: float


@contextlib.contextmanager
def _deterministic_cpu() -> Iterator[Any]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one reduction order, whatever the machine
    try:
        yield torch
    finally:
        torch.set_num_threads(threads)


def _network(width: int, settings: GNNSettings) -> Any:
    import torch

    with warnings.catch_warnings():
        # torch-geometric's import still calls torch.jit.script, which this torch deprecates.
        warnings.filterwarnings("ignore", message="`torch.jit.script` is deprecated", category=DeprecationWarning)
        from torch_geometric.nn import GATv2Conv, global_mean_pool

    class GATv2Regressor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            sizes = [width] + [settings.hidden * settings.heads] * settings.layers
            self.convs = torch.nn.ModuleList(
                # Self loops are part of the batched edge index already (built once per fit).
                GATv2Conv(sizes[i], settings.hidden, heads=settings.heads, add_self_loops=False)
                for i in range(settings.layers))
            self.head = torch.nn.Linear(sizes[-1], 1)

        def forward(self, x: Any, edge_index: Any, batch: Any, graphs: int) -> Any:
            for conv in self.convs:
                x = torch.nn.functional.elu(conv(x, edge_index))
                x = torch.nn.functional.dropout(x, p=settings.dropout, training=self.training)
            return torch.sigmoid(self.head(global_mean_pool(x, batch, size=graphs))).squeeze(-1)

    return GATv2Regressor()


class GATv2Surrogate:
    """fit(nodes, targets, seed) / predict(nodes) on batches of same-shaped team graphs."""

    def __init__(self, graph: TeamGraph, settings: GNNSettings | None = None) -> None:
        self.graph = graph
        self.settings = settings or GNNSettings()
        self.model: Any = None

    def _batch(self, nodes: np.ndarray) -> tuple[Any, Any, Any, int]:
        import torch

        graphs, k, width = nodes.shape
        x = torch.as_tensor(nodes.reshape(graphs * k, width), dtype=torch.float32)
        loops = tuple((i, i) for i in range(k))
        base = torch.as_tensor(self.graph.edges + loops, dtype=torch.long).T  # (2, E): edges and self loops
        offsets = (torch.arange(graphs, dtype=torch.long) * k).repeat_interleave(base.shape[1])
        edge_index = base.repeat(1, graphs) + offsets
        batch = torch.arange(graphs, dtype=torch.long).repeat_interleave(k)
        return x, edge_index, batch, graphs

    def fit(self, nodes: np.ndarray, targets: np.ndarray, *, seed: int) -> FitReport:
        started = time.monotonic()
        s = self.settings
        with _deterministic_cpu() as torch:
            torch.manual_seed(seed)
            model = _network(nodes.shape[2], s)
            optimizer = torch.optim.Adam(model.parameters(), lr=s.lr, weight_decay=s.weight_decay, foreach=True)
            x, edge_index, batch, graphs = self._batch(nodes)
            y = torch.as_tensor(np.asarray(targets), dtype=torch.float32)
            best_loss, best_state, since_best, epoch = float("inf"), None, 0, 0
            model.train()
            for epoch in range(1, s.max_epochs + 1):
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x, edge_index, batch, graphs), y)
                loss.backward()
                optimizer.step()
                value = float(loss.detach())
                if value < best_loss - 1e-9:
                    best_loss, since_best = value, 0
                    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                else:
                    since_best += 1
                    if since_best >= s.patience:
                        break
            if best_state is not None:
                model.load_state_dict(best_state)
            model.eval()
            self.model = model
        return FitReport(epochs=epoch, loss=best_loss, seconds=time.monotonic() - started)

    def predict(self, nodes: np.ndarray) -> np.ndarray:
        if self.model is None:
            raise RuntimeError("the surrogate has not been fitted")
        with _deterministic_cpu() as torch, torch.no_grad():
            x, edge_index, batch, graphs = self._batch(nodes)
            return self.model(x, edge_index, batch, graphs).double().numpy()

"""The graph neural surrogate: upstream MASPOB's ``WorkflowGAT``, rewritten here.

The network, layer by layer (upstream ``scripts/gnn_model.py``; our code):

1. node encoder, shared by all nodes: ``Linear(width, min(256, width // 8))`` - ReLU - dropout -
   ``Linear(.., hidden)`` - ReLU (384-d MiniLM embeddings: 384 -> 48 -> 32);
2. ``layers`` GATv2 layers (torch-geometric ``GATv2Conv``, ``heads`` heads, attention dropout
   ``dropout``, self loops added by the layer), each followed by ReLU; the first maps ``hidden``
   to ``heads x hidden`` (concatenated heads), later ones take ``heads x hidden`` and the last of
   several averages its heads (upstream's ``concat=(i < layers - 1)``);
3. the mean over the nodes;
4. head: ``Linear(.., hidden)`` - ReLU - dropout - ``Linear(hidden, 1)`` - sigmoid (scores lie in
   [0, 1]).

Initialization as upstream: Kaiming-normal (fan-in, ReLU) for the encoder's linears and the
head's first, Xavier-uniform for the head's last, zero biases; GATv2 layers keep their own.
Training as upstream's ``train_with_early_stopping``: full-batch Adam on the mean squared error
with ``ReduceLROnPlateau`` (factor 0.7, patience 30, floor 1e-5) on the training loss, at most
``max_epochs`` epochs, stopping after ``patience`` epochs without a loss lower by more than
``min_delta``; the best weights are kept. Every fit starts from fresh weights (upstream resets
the parameters and the optimizer state before each refit).

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

ENCODER_CAP = 256  # upstream: the encoder's middle width is min(256, width // 8)


@dataclass(frozen=True, slots=True)
class GNNSettings:
    hidden: int = 32
    layers: int = 1
    heads: int = 4
    dropout: float = 0.05  # encoder, attention and head dropout (one knob upstream)
    lr: float = 5e-3
    weight_decay: float = 1e-5
    max_epochs: int = 800
    patience: int = 200
    min_delta: float = 1e-10
    plateau_factor: float = 0.7  # ReduceLROnPlateau, as upstream's training loop
    plateau_patience: int = 30
    min_lr: float = 1e-5


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


def encoder_width(width: int) -> int:
    return max(1, min(ENCODER_CAP, width // 8))


def network(width: int, settings: GNNSettings) -> Any:
    """A freshly initialized WorkflowGAT-shaped regressor for ``width``-d node features."""
    import torch
    from torch import nn

    with warnings.catch_warnings():
        # torch-geometric's import still calls torch.jit.script, which this torch deprecates.
        warnings.filterwarnings("ignore", message="`torch.jit.script` is deprecated", category=DeprecationWarning)
        from torch_geometric.nn import GATv2Conv, global_mean_pool

    s = settings

    def kaiming(layer: Any) -> Any:
        nn.init.kaiming_normal_(layer.weight, mode="fan_in", nonlinearity="relu")
        nn.init.zeros_(layer.bias)
        return layer

    class WorkflowGATv2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            middle = encoder_width(width)
            self.encoder = nn.Sequential(kaiming(nn.Linear(width, middle)), nn.ReLU(), nn.Dropout(s.dropout),
                                         kaiming(nn.Linear(middle, s.hidden)), nn.ReLU())
            convs = []
            for i in range(s.layers):
                concat = s.layers == 1 or i < s.layers - 1
                convs.append(GATv2Conv(s.hidden if i == 0 else s.hidden * s.heads, s.hidden, heads=s.heads,
                                       concat=concat, dropout=s.dropout, add_self_loops=True))
            self.convs = nn.ModuleList(convs)
            pooled = s.hidden * s.heads if s.layers == 1 else s.hidden
            last = nn.Linear(s.hidden, 1)
            nn.init.xavier_uniform_(last.weight)
            nn.init.zeros_(last.bias)
            self.head = nn.Sequential(kaiming(nn.Linear(pooled, s.hidden)), nn.ReLU(), nn.Dropout(s.dropout),
                                      last, nn.Sigmoid())

        def forward(self, x: Any, edge_index: Any, batch: Any, graphs: int) -> Any:
            h = self.encoder(x)
            for conv in self.convs:
                h = torch.relu(conv(h, edge_index))
            return self.head(global_mean_pool(h, batch, size=graphs)).squeeze(-1)

    return WorkflowGATv2()


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
        # The team's edges (both directions); GATv2Conv adds each node's self loop itself.
        base = torch.as_tensor(self.graph.edges, dtype=torch.long).reshape(-1, 2).T  # (2, E)
        offsets = (torch.arange(graphs, dtype=torch.long) * k).repeat_interleave(base.shape[1])
        edge_index = base.repeat(1, graphs) + offsets
        batch = torch.arange(graphs, dtype=torch.long).repeat_interleave(k)
        return x, edge_index, batch, graphs

    def fit(self, nodes: np.ndarray, targets: np.ndarray, *, seed: int) -> FitReport:
        started = time.monotonic()
        s = self.settings
        with _deterministic_cpu() as torch:
            torch.manual_seed(seed)
            model = network(nodes.shape[2], s)
            optimizer = torch.optim.Adam(model.parameters(), lr=s.lr, weight_decay=s.weight_decay, foreach=True)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer, mode="min", factor=s.plateau_factor, patience=s.plateau_patience, min_lr=s.min_lr)
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
            self.model = model
        return FitReport(epochs=epoch, loss=best_loss, seconds=time.monotonic() - started)

    def predict(self, nodes: np.ndarray) -> np.ndarray:
        if self.model is None:
            raise RuntimeError("the surrogate has not been fitted")
        with _deterministic_cpu() as torch, torch.no_grad():
            x, edge_index, batch, graphs = self._batch(nodes)
            return self.model(x, edge_index, batch, graphs).double().numpy()

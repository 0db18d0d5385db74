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

How it is computed: the default one-layer network trains with ``gat_kernel`` (one compiled
numba loop per chunk of epochs; the same numbers as the straightforward torch-geometric/autograd
loop in ``autograd_training`` and the numpy trainer ``fast_gat`` within float32 rounding, proven
in ``tests/optimizers/test_maspob.py``). Everything runs on the CPU,
single-threaded and seeded, so the same pulls and seed give the same predictions in every
process; the network is never saved (a resumed job retrains it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from optimizers.maspob.graph import TeamGraph
from optimizers.maspob.network import ENCODER_CAP, encoder_width, initial_weights, network

# The formulations of one training rule: compiled (default for one layer), numpy, torch autograd.
TRAINERS = ("kernel", "fast", "autograd")
ONE_LAYER_TRAINERS = ("kernel", "fast")
ONE_LAYER_DEFAULT = "kernel"  # what a one-layer network trains with when no trainer is named

__all__ = ["ENCODER_CAP", "FitReport", "GATv2Surrogate", "GNNSettings", "TRAINERS", "encoder_width", "initial_state",
           "network", "train_rule"]


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


class GATv2Surrogate:
    """fit(nodes, targets, seed) / predict(nodes) on batches of same-shaped team graphs.

    One GATv2 layer (the default) trains with the compiled trainer (``gat_kernel``); deeper
    networks with the straightforward autograd formulation (``autograd_training``). ``trainer``
    names another formulation of the same rule (``TRAINERS``), for comparisons and benchmarks. Both start
    from the torch ``network.network``'s initial weights for ``torch.manual_seed(seed)``
    (``initial_state``) and draw the dropout masks from ``fast_gat.DropoutMasks(seed)``."""

    def __init__(self, graph: TeamGraph, settings: GNNSettings | None = None, *, trainer: str | None = None) -> None:
        self.graph = graph
        self.settings = settings or GNNSettings()
        if trainer is not None and trainer not in TRAINERS:
            raise ValueError(f"unknown surrogate trainer {trainer!r} (known: {', '.join(TRAINERS)})")
        if trainer in ONE_LAYER_TRAINERS and self.settings.layers != 1:
            raise ValueError(f"the {trainer} trainer computes one GATv2 layer only (gnn_layers={self.settings.layers})")
        self.trainer = trainer
        self._predict: Any = None

    @property
    def model_kind(self) -> str:
        """Which trainer computes this network: ``kernel`` (one GATv2 layer, the default),
        ``fast`` (numpy, one layer) or ``autograd``."""
        if self.trainer is not None:
            return self.trainer
        return ONE_LAYER_DEFAULT if self.settings.layers == 1 else "autograd"

    def fit(self, nodes: np.ndarray, targets: np.ndarray, *, seed: int) -> FitReport:
        from optimizers.maspob.autograd_training import fit as autograd_fit
        from optimizers.maspob.autograd_training import predict as autograd_predict
        import optimizers.maspob.fast_gat as fast_gat
        import optimizers.maspob.gat_kernel as gat_kernel

        started = time.monotonic()
        s = self.settings
        masks = fast_gat.DropoutMasks(seed, s.dropout)
        kind = self.model_kind
        if kind == "autograd":
            done = autograd_fit(self.graph, nodes, targets, s, seed=seed, masks=masks)
            model = done.model
            self._predict = lambda x: autograd_predict(model, self.graph, x)
            return FitReport(epochs=done.epochs, loss=done.best_loss, seconds=time.monotonic() - started)
        module: Any = gat_kernel if kind == "kernel" else fast_gat
        net = (gat_kernel.KernelGAT if kind == "kernel" else fast_gat.FastWorkflowGAT)(
            initial_state(nodes.shape[2], s, seed), self.graph, s.heads)
        result = module.train(net, nodes, targets, train_rule(s), masks)
        self._predict = lambda x: module.predict(net, x)
        return FitReport(epochs=result.epochs, loss=result.best_loss, seconds=time.monotonic() - started)

    def predict(self, nodes: np.ndarray) -> np.ndarray:
        if self._predict is None:
            raise RuntimeError("the surrogate has not been fitted")
        return np.asarray(self._predict(nodes), dtype=np.float64)


def initial_state(width: int, settings: GNNSettings, seed: int) -> dict[str, np.ndarray]:
    """The torch network's initial weights for ``seed`` (as numpy arrays, by parameter name):
    what ``network`` draws after ``torch.manual_seed(seed)``. The one-layer network's are drawn
    on bare tensors from a private generator with that seed (``network.initial_weights``, the
    same draws without building the module or reseeding torch's global generator); deeper ones
    from the module itself."""
    import torch

    if settings.layers == 1:
        weights = initial_weights(width, settings, torch.Generator().manual_seed(seed))
        return {name: value.numpy() for name, value in weights.items()}
    from optimizers.maspob.autograd_training import deterministic_cpu

    with deterministic_cpu() as torch:
        torch.manual_seed(seed)
        model = network(width, settings)
        return {name: value.detach().numpy().copy() for name, value in model.state_dict().items()}


def train_rule(settings: GNNSettings) -> Any:
    from optimizers.maspob.fast_gat import TrainRule

    s = settings
    return TrainRule(lr=s.lr, weight_decay=s.weight_decay, max_epochs=s.max_epochs, patience=s.patience,
                     min_delta=s.min_delta, plateau_factor=s.plateau_factor, plateau_patience=s.plateau_patience,
                     min_lr=s.min_lr, dropout=s.dropout)

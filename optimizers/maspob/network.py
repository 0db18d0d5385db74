"""The WorkflowGATv2 network as a torch module (torch and torch-geometric imported on first use).

Its shape and initialization are described in ``optimizers.maspob.surrogate``; it is the network
the straightforward formulation (``optimizers.maspob.autograd_training``) trains, and its draws
are the initial weights of every fit. ``initial_weights`` makes the same draws for the one-layer
network without building it (see there).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

ENCODER_CAP = 256  # upstream: the encoder's middle width is min(256, width // 8)


def encoder_width(width: int) -> int:
    return max(1, min(ENCODER_CAP, width // 8))


def network(width: int, settings: Any) -> Any:
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


def initial_weights(width: int, settings: Any, generator: Any) -> dict[str, Any]:
    """The one-layer ``network``'s initial parameters, drawn on bare tensors from ``generator``.

    Why: every fit starts from fresh weights, and building the torch / torch-geometric module
    just to read them cost ~7 ms of a gym fit's CPU (116 fits in a budget-600 job). Here the
    module's constructors are replayed draw for draw: the same ``torch.nn.init`` calls on tensors
    of the same shapes, in the same order, including the draws a later initializer overwrites
    (``nn.Linear``'s default init before MASPOB's Kaiming/Xavier; torch-geometric's ``Linear``
    initializes in its constructor and again in ``GATv2Conv.reset_parameters``), so a generator
    seeded like ``torch.manual_seed(seed)`` yields the module's weights bit for bit (pinned by
    ``test_initial_weights_are_the_networks_draws`` for several shapes and seeds).
    The order of ``network``: encoder ``Linear(width, middle)``, ``Linear(middle, hidden)``;
    ``GATv2Conv`` (``lin_l``, ``lin_r``; reset: ``lin_l``, ``lin_r``, ``att``); the head's last
    ``Linear(hidden, 1)`` (made before the head's first); the head's ``Linear(heads x hidden, hidden)``.
    """
    import torch
    from torch import nn

    s = settings
    if s.layers != 1:
        raise ValueError("initial_weights replays the one-layer network only")
    g = generator

    def default_linear(out_features: int, in_features: int) -> tuple[Any, Any]:
        # nn.Linear.reset_parameters: Kaiming-uniform (a = sqrt 5) weight, U(+-1/sqrt(fan_in)) bias.
        weight, bias = torch.empty(out_features, in_features), torch.empty(out_features)
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=g)
        bound = 1 / math.sqrt(in_features)
        nn.init.uniform_(bias, -bound, bound, generator=g)
        return weight, bias

    def kaiming(out_features: int, in_features: int) -> tuple[Any, Any]:
        weight, bias = default_linear(out_features, in_features)
        nn.init.kaiming_normal_(weight, mode="fan_in", nonlinearity="relu", generator=g)
        return weight, bias.zero_()

    def glorot(tensor: Any) -> Any:  # torch_geometric.nn.inits.glorot
        stdv = math.sqrt(6.0 / (tensor.size(-2) + tensor.size(-1)))
        return tensor.uniform_(-stdv, stdv, generator=g)

    def pyg_linear(weight: Any, bias: Any) -> None:  # torch-geometric Linear(glorot weight, default bias)
        glorot(weight)
        bound = 1.0 / math.sqrt(weight.size(1))
        bias.uniform_(-bound, bound, generator=g)

    wide = s.hidden * s.heads
    state: dict[str, Any] = {}
    state["encoder.0.weight"], state["encoder.0.bias"] = kaiming(encoder_width(width), width)
    state["encoder.3.weight"], state["encoder.3.bias"] = kaiming(s.hidden, encoder_width(width))
    lin_l = (torch.empty(wide, s.hidden), torch.empty(wide))
    lin_r = (torch.empty(wide, s.hidden), torch.empty(wide))
    for pair in (lin_l, lin_r, lin_l, lin_r):  # constructors, then GATv2Conv.reset_parameters
        pyg_linear(*pair)
    state["convs.0.lin_l.weight"], state["convs.0.lin_l.bias"] = lin_l
    state["convs.0.lin_r.weight"], state["convs.0.lin_r.bias"] = lin_r
    state["convs.0.att"] = glorot(torch.empty(1, s.heads, s.hidden))
    state["convs.0.bias"] = torch.zeros(wide)
    last_weight, last_bias = default_linear(1, s.hidden)
    state["head.3.weight"] = nn.init.xavier_uniform_(last_weight, generator=g)
    state["head.3.bias"] = last_bias.zero_()
    state["head.0.weight"], state["head.0.bias"] = kaiming(s.hidden, wide)
    return state

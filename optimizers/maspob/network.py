"""The WorkflowGATv2 network as a torch module (torch and torch-geometric imported on first use).

Its shape and initialization are described in ``optimizers.maspob.surrogate``; it draws the
initial weights of every fit and is the network the straightforward formulation
(``optimizers.maspob.autograd_training``) trains.
"""

from __future__ import annotations

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

"""lcb-grid's Hydra sweeper on the current Optuna API (``hydra/sweeper=optuna``).

The published ``hydra-optuna-sweeper`` pins ``optuna<3``; this plugin needs only optuna >= 3.4
(the project pins 5.1.0). Hydra finds it because ``hydra_plugins`` is a namespace package that
Hydra scans for plugins.
"""

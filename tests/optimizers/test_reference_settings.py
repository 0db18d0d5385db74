"""The settings the fidelity sheets (docs/methods/<method>.md) list as the reference's:
each value is written out here from the reference's frozen policy, and both our yaml
(conf/method/<method>.yaml, what a job runs with) and our params' default (what a job that names
no value gets) must equal it. A change in either place fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from optimizers.gepa.optimizer import GEPAParams
from optimizers.hivemind.optimizer import HiveMindParams
from optimizers.mamut_gepa.optimizer import MAMUTGEPAParams
from optimizers.mapro.optimizer import MAPROParams
from optimizers.maspo.optimizer import MASPOParams
from optimizers.mipro.optimizer import MIPROParams
from optimizers.reflection import params_from
from optimizers.tavo.optimizer import TAVOParams

REPO = Path(__file__).resolve().parents[2]

REFERENCE: dict[str, tuple[type, dict[str, Any]]] = {
    # GEPAPolicy (dspy GEPA 3.2.0 / gepa 0.0.27)
    "gepa": (GEPAParams, {"max_full_evals": 5, "reflection_minibatch_size": 3, "candidate_selection_strategy": "pareto",
                          "component_selector": "round_robin", "use_merge": True, "max_merge_invocations": 5,
                          "early_stop_patience": 3, "skip_perfect_score": True, "perfect_score": 1.0, "seed": 0}),
    # MIPROPolicy (dspy MIPROv2 3.2.0)
    "mipro": (MIPROParams, {"num_candidates": 3, "num_trials": 3, "max_bootstrapped_demos": 4, "minibatch": False,
                            "minibatch_size": 35, "minibatch_full_eval_steps": 5, "seed": 9,
                            "view_data_batch_size": 10, "program_aware": True, "data_aware": True,
                            "tip_aware": True, "fewshot_aware": True}),
    # MAPRO's judge and probe (node_reward's _JUDGE_CFG; the probe's decoding), also pinned in the
    # requests a job sends (test_mapro.py::test_mapro_uses_cut_probe_and_judge_replies)
    "mapro": (MAPROParams, {"judge_max_tokens": 8, "judge_temperature": 0.2, "probe_max_tokens": 768,
                            "probe_temperature": 0.2, "probe_top_p": 0.9, "candidate_count": 5}),
    # MASPOSettings (beam, offspring, minibatch, depth, rounds, reflection in flight) and the
    # search's proposal temperature, judge temperature and joint-score weights
    "maspo": (MASPOParams, {"beam_width": 2, "offspring": 2, "minibatch": 10, "maximum_search_depth": 9,
                            "rounds_per_turn": 3, "reflection_inflight": 4, "proposal_temperature": 0.7,
                            "judge_temperature": 0.0, "judge_model": "reflection", "local_weight": 0.4,
                            "lookahead_weight": 0.4, "global_weight": 0.2}),
    # HiveMind's reflection decoding and lesson cap
    "hivemind": (HiveMindParams, {"reflection_temperature": 0.7, "reflection_top_p": 1.0, "max_lessons": 6}),
    # MAMUTGEPASettings (metric_call_limit = the protocol budget, 600)
    "mamut_gepa": (MAMUTGEPAParams, {"metric_call_limit": 600, "candidate_selection": "pareto",
                                     "module_selector": "round_robin", "use_merge": True,
                                     "reflection_minibatch_size": 3, "reflection_temperature": 0.7,
                                     "reflection_top_p": 1.0}),
    # TAVOSettings, and the step rating's temperature (Eq. 3 credit calls at 0.3)
    "tavo": (TAVOParams, {"train_batch_size": 6, "max_outer_rounds": 5, "min_validation_batch": 3,
                          "adoption_threshold": 0.01, "validation_delta_tolerance": 0.0, "attempts_per_round": 2,
                          "patience": 2, "rng_seed_base": 233, "reflection_concurrency": 4,
                          "default_temperature": 0.5, "rating_temperature": 0.3, "credit": True}),
}


@pytest.mark.parametrize("method", sorted(REFERENCE))
def test_configured_and_default_settings_are_the_references(method: str) -> None:
    params_class, expected = REFERENCE[method]
    configured = yaml.safe_load((REPO / "conf" / "method" / f"{method}.yaml").read_text())
    default = params_from(params_class, {}, method)
    for knob, value in expected.items():
        assert configured[knob] == value, f"conf/method/{method}.yaml: {knob}"
        assert getattr(default, knob) == value, f"{params_class.__name__}.{knob}"

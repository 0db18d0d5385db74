"""The MDE formula of optimizers.protocol.aggregate.power, checked by simulating its model."""

from __future__ import annotations

import numpy as np
import pytest

from optimizers.protocol.aggregate import power
from optimizers.protocol.aggregate.power import Assumptions, Design


def simulated_power(design: Design, assumptions: Assumptions, effect: float, *, sims: int, seed: int) -> float:
    """Share of simulated experiments in which the paired t-test over problems rejects.

    Each problem is, with probability icc, 'settled' (all its paired rolls repeat one outcome),
    else its rolls are independent; a roll pair is (seed arm, deployed arm) with the pass rate,
    discordance and effect assumed. That is the model the formula is derived for.
    """
    rng = np.random.default_rng(seed)
    p, psi, n, m = assumptions.pass_rate, assumptions.discordance, design.problems, design.rolls_per_problem
    # Categories of one roll pair: deployed only passes, seed only passes, both pass, neither.
    probs = np.array([(psi + effect) / 2, (psi - effect) / 2, p - (psi - effect) / 2, 0.0])
    probs[3] = 1.0 - probs[:3].sum()
    assert (probs >= 0).all()
    counts = rng.multinomial(m, probs, size=(sims, n))
    independent = (counts[..., 0] - counts[..., 1]) / m
    settled_category = rng.choice(4, size=(sims, n), p=probs)
    settled = np.select([settled_category == 0, settled_category == 1], [1.0, -1.0], 0.0)
    d = np.where(rng.random((sims, n)) < assumptions.icc, settled, independent)
    sd = d.std(axis=1, ddof=1)
    t = np.divide(d.mean(axis=1) * np.sqrt(n), sd, out=np.zeros(sims), where=sd > 0)
    critical = power.t_quantile(1.0 - design.level / 2.0, n - 1)
    return float((np.abs(t) > critical).mean())


@pytest.mark.parametrize(("design", "assumptions"), [
    (Design(50, 3, 1), Assumptions(0.4, 0.2, 0.0)),  # the reference's shape, one cell
    (Design(200, 3, 1), Assumptions(0.4, 0.2, 0.5)),
    (Design(60, 2, 10, tests=8), Assumptions(0.4, 0.25, 0.3)),  # samples, a Holm family of 8
    (Design(150, 1, 4, tests=4), Assumptions(0.3, 0.15, 0.1)),
    (Design(600, 3, 10, tests=8), Assumptions(0.4, 0.2, 0.5)),  # the powered design's shape
])
def test_simulated_power_at_the_mde_is_the_stated_power(design: Design, assumptions: Assumptions) -> None:
    effect = power.mde(design, assumptions)
    simulated = simulated_power(design, assumptions, effect, sims=4000, seed=7)
    assert abs(simulated - design.power) <= 0.03, (design, effect, simulated)
    # Positive control: the simulation can tell a wrong effect from the right one.
    assert simulated_power(design, assumptions, effect * 0.6, sims=3000, seed=8) < design.power - 0.1
    assert simulated_power(design, assumptions, 0.0, sims=3000, seed=9) < 2.5 * design.level + 0.01


@pytest.mark.parametrize(("design", "assumptions"), [
    (Design(50, 3, 1), Assumptions(0.4, 0.2, 0.5)),
    (Design(50, 3, 1, tests=24), Assumptions(0.4, 0.2, 0.5)),  # three topologies x eight methods
    (Design(100, 1, 1, tests=32), Assumptions(0.4, 0.2, 0.5)),
])
def test_mde_is_conservative_where_the_effect_nears_the_discordance(design: Design, assumptions: Assumptions) -> None:
    """Skewed differences (effect close to the discordance, few problems, small Holm level): the
    t-test is more powerful than the normal formula says, so the printed MDE is an upper bound."""
    effect = power.mde(design, assumptions)
    assert effect > 0.65 * assumptions.discordance
    simulated = simulated_power(design, assumptions, effect, sims=4000, seed=11)
    assert design.power - 0.01 <= simulated <= design.power + 0.12, simulated


def test_t_quantiles_match_tables() -> None:
    # Values from standard t tables (scipy.stats.t.ppf).
    assert power.t_quantile(0.975, 49) == pytest.approx(2.009575, abs=1e-5)
    assert power.t_quantile(0.8, 5) == pytest.approx(0.919544, abs=1e-5)
    assert power.t_quantile(0.975, 1) == pytest.approx(12.706205, abs=1e-4)
    assert power.t_cdf(0.0, 7) == pytest.approx(0.5)
    assert power.two_sided_t_p(2.009575, 49) == pytest.approx(0.05, abs=1e-6)


def test_mde_shrinks_with_problems_and_rolls_down_to_the_icc_floor() -> None:
    a = Assumptions(0.4, 0.2, 0.5)
    assert power.mde_pp(Design(200, 3, 1), a) < power.mde_pp(Design(50, 3, 1), a)
    assert power.mde_pp(Design(50, 3, 10), a) < power.mde_pp(Design(50, 3, 1), a)
    assert power.mde_pp(Design(50, 3, 1, tests=8), a) > power.mde_pp(Design(50, 3, 1), a)
    # Past the floor sqrt(c^2 psi icc / n), more rolls per problem barely help.
    assert power.mde_pp(Design(50, 5, 20), a) - power.mde_pp(Design(50, 5, 2000), a) < 0.3


def test_smallest_design_reaches_the_target_at_the_least_cost() -> None:
    a = Assumptions(0.4, 0.2, 0.5)

    def cost(d: Design) -> float:
        return d.seeds * (600 + 2 * d.problems * d.samples)

    found = power.smallest_design(5.0, a, tests=8, cost=cost)
    assert found is not None and power.mde_pp(found, a) <= 5.0
    cheaper = [Design(n, s, k, 8) for n in power.PROBLEM_STEPS for s in power.SEED_STEPS
               for k in power.SAMPLE_STEPS if cost(Design(n, s, k, 8)) < cost(found)]
    assert all(power.mde_pp(d, a) > 5.0 for d in cheaper)
    assert power.smallest_design(5.0, a, tests=8, cost=cost, max_problems=100) is None


def test_assumptions_refuse_impossible_discordance() -> None:
    with pytest.raises(ValueError, match="impossible"):
        Assumptions(pass_rate=0.05, discordance=0.2)


def test_icc_estimate_recovers_settled_and_independent_problems() -> None:
    settled = [[1.0] * 4, [0.0] * 4, [-1.0] * 4, [0.0] * 4, [1.0] * 4]
    assert power.estimate_icc(settled) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    independent = rng.choice([-1.0, 0.0, 1.0], p=[0.1, 0.8, 0.1], size=(400, 6)).tolist()
    assert abs(power.estimate_icc(independent)) < 0.05
    assert power.estimate_icc([[1.0]]) is None

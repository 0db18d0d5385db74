"""CPU cost of one gym rollout per topology (the real team runtime on the in-process scripted
model, scripted grading), and of a whole job of a cheap method, against the gym's speed target.

    .venv/bin/python benchmarks/perf/gym_rollout_cost.py [--rollouts 200]

The full gym (8 spending methods x 4 worlds x budgets 50 + 150 + 600 x 10 seeds) charges at most
256,000 rollouts; at the target of 5 ms of CPU per rollout that is about 11 minutes on two cores,
leaving the rest of the two-hour budget to the methods' own compute (MASPOB's surrogate training
is most of it).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from tempfile import TemporaryDirectory

TARGET_MS = 5.0


def rollout_cost(topology: str, rollouts: int) -> float:
    from optimizers.gym.system import GymSystem, seed_candidate
    from optimizers.gym.worlds import make_world

    world = make_world(f"credit-{topology}")
    seed, spec, roster = seed_candidate(world)
    system = GymSystem(world, spec, roster)

    async def go() -> None:
        for index in range(rollouts):
            await system.run(seed, world.problems[index % len(world.problems)], seed=index, mode="optimize")

    asyncio.run(go())  # warm-up: imports, compiled team graphs
    started = time.process_time()
    asyncio.run(go())
    return (time.process_time() - started) / rollouts * 1000


def job_cost(method: str, budget: int) -> tuple[float, int]:
    from optimizers.gym.runner import GymJob, run_job

    with TemporaryDirectory() as out:
        started = time.process_time()
        result = run_job(GymJob("credit", method, budget, 0), Path(out))
        return time.process_time() - started, result["charged"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=200)
    args = parser.parse_args()
    print(f"{'topology':<14} {'CPU ms/rollout':>15}  (target < {TARGET_MS:g})")
    for topology in ("single", "independent", "sequential", "centralized", "decentralized"):
        print(f"{topology:<14} {rollout_cost(topology, args.rollouts):>15.2f}")
    seconds, charged = job_cost("hivemind", 150)
    print(f"hivemind job, budget 150: {seconds:.2f} s CPU for {charged} charged rollouts "
          f"({seconds / max(charged, 1) * 1000:.2f} ms each, method included)")


if __name__ == "__main__":
    main()

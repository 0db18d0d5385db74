"""Built-in standard-input problems (AtCoder/Codeforces style), written for lcb-grid."""

from __future__ import annotations

import heapq
import random
from bisect import bisect_left
from fractions import Fraction

from lcb.builtin.model import BuiltinProblem


def _lines(*rows: object) -> str:
    return "\n".join(str(r) for r in rows) + "\n"


# --------------------------------------------------------------------------- demo: series sum

DEMO_STDIN = BuiltinProblem(
    id="demo_stdin",
    title="Stacked Crates",
    body="""
A warehouse stacks crates in a triangle: the top row holds 1 crate, the row below it 2 crates,
and so on, each row holding one crate more than the row above. The triangle has N rows.

How many crates are in the triangle?

Input

The input is a single integer N.

Output

Print the total number of crates.

Constraints

- 1 <= N <= 10^9
- N is an integer.
""",
    platform="atcoder",
    difficulty="easy",
    contest_date="2024-01-06T00:00:00",
    public_cases=(3, 10),
    hidden_cases=lambda rng: [1, 2, 7, 100, 999_999_999, 10**9, rng.randint(10**5, 10**6)],
    render_input=lambda n: _lines(n),
    expected_output=lambda n: _lines(n * (n + 1) // 2),
    correct="n = int(input())\nprint(n * (n + 1) // 2)\n",
    wrong="n = int(input())\nprint(n * (n - 1) // 2)\n",
)


# --------------------------------------------------------------------------- temperature swing


def _swing_cases(rng: random.Random) -> list[list[int]]:
    cases = [[5, 5], [-100, 100], [100, -100], [3, -7, 2, 2, 9, -1]]
    for n in (10, 1000, 20_000):
        cases.append([rng.randint(-100, 100) for _ in range(n)])
    # A big drop after mild rises: only a solution that takes absolute values sees it.
    cases.append([0, 1, 2, 3, 4, -60, -58, -55])
    return cases


TEMPERATURE_SWING = BuiltinProblem(
    id="builtin_temperature_swing",
    title="Temperature Swing",
    body="""
A weather station recorded the noon temperature on N consecutive days: T_1, T_2, ..., T_N
(degrees Celsius).

The swing between two consecutive days i and i+1 is the absolute difference |T_i - T_{i+1}|.
Print the largest swing over all pairs of consecutive days.

Input

N
T_1 T_2 ... T_N

Output

Print the largest swing as an integer.

Constraints

- 2 <= N <= 2 * 10^5
- -100 <= T_i <= 100
- All input values are integers.
""",
    platform="atcoder",
    difficulty="easy",
    contest_date="2024-02-03T00:00:00",
    public_cases=([12, 15, 11, 20], [-3, -3]),
    hidden_cases=_swing_cases,
    render_input=lambda t: _lines(len(t), " ".join(map(str, t))),
    expected_output=lambda t: _lines(max(abs(a - b) for a, b in zip(t, t[1:]))),
    correct=(
        "n = int(input())\n"
        "t = list(map(int, input().split()))\n"
        "print(max(abs(t[i] - t[i + 1]) for i in range(n - 1)))\n"
    ),
    # Only looks at rises, so a drop larger than every rise is missed.
    wrong=(
        "n = int(input())\n"
        "t = list(map(int, input().split()))\n"
        "print(max(max(t[i + 1] - t[i] for i in range(n - 1)), 0))\n"
    ),
)


# --------------------------------------------------------------------------- travel time (decimal)


def _average_speed(legs: list[tuple[int, int]]) -> Fraction:
    distance = sum(d for d, _ in legs)
    hours = sum(Fraction(d, s) for d, s in legs)
    return distance / hours


def _rounded_6(value: Fraction) -> str:
    scaled = value * 10**6
    units = int(scaled + Fraction(1, 2))  # half up; ties never occur (see _clear_of_ties)
    return f"{units // 10**6}.{units % 10**6:06d}"


def _clear_of_ties(legs: list[tuple[int, int]]) -> bool:
    # Keep the exact value well away from a rounding boundary so that float, Decimal and
    # Fraction solutions all print the same six digits.
    frac = (_average_speed(legs) * 10**6) % 1
    return abs(frac - Fraction(1, 2)) > Fraction(1, 100)


def _travel_cases(rng: random.Random) -> list[list[tuple[int, int]]]:
    cases: list[list[tuple[int, int]]] = [[(7, 3)], [(1, 1000), (1000, 1)]]
    for n in (3, 5, 50, 1000, 1000):
        while True:
            legs = [(rng.randint(1, 1000), rng.randint(1, 1000)) for _ in range(n)]
            if _clear_of_ties(legs):
                break
        cases.append(legs)
    return [c for c in cases if _clear_of_ties(c)]


TRAVEL_TIME = BuiltinProblem(
    id="builtin_travel_time",
    title="Average Speed",
    body="""
A courier drives a route made of N legs. Leg i is D_i kilometres long and the courier drives it
at a constant speed of S_i kilometres per hour.

Find the average speed of the whole trip, that is, the total distance divided by the total time.

Input

N
D_1 S_1
D_2 S_2
...
D_N S_N

Output

Print the average speed in kilometres per hour, rounded to exactly 6 digits after the decimal
point. It is guaranteed that the exact answer is not close to a rounding boundary.

Constraints

- 1 <= N <= 1000
- 1 <= D_i, S_i <= 1000
- All input values are integers.
""",
    platform="atcoder",
    difficulty="medium",
    contest_date="2024-03-02T00:00:00",
    public_cases=([(60, 60), (60, 30)], [(100, 50)]),
    hidden_cases=_travel_cases,
    render_input=lambda legs: _lines(len(legs), *(f"{d} {s}" for d, s in legs)),
    expected_output=lambda legs: _lines(_rounded_6(_average_speed(legs))),
    correct=(
        "n = int(input())\n"
        "total_d = 0\n"
        "total_t = 0.0\n"
        "for _ in range(n):\n"
        "    d, s = map(int, input().split())\n"
        "    total_d += d\n"
        "    total_t += d / s\n"
        "print(f'{total_d / total_t:.6f}')\n"
    ),
    # The mean of the speeds is not the average speed unless every leg takes equal time.
    wrong=(
        "n = int(input())\n"
        "speeds = [int(input().split()[1]) for _ in range(n)]\n"
        "print(f'{sum(speeds) / n:.6f}')\n"
    ),
)


# ----------------------------------------------------------------- binary strings (big integers)


def _no_adjacent_ones(n: int) -> int:
    a, b = 1, 2  # counts for lengths 0 and 1
    for _ in range(n - 1):
        a, b = b, a + b
    return b if n >= 1 else a


BINARY_STRINGS = BuiltinProblem(
    id="builtin_binary_strings",
    title="Quiet Neighbours",
    body="""
A binary string is quiet if it never has two 1s next to each other. For example, 1010 and 0001
are quiet, while 0110 is not.

Given N, print the number of quiet binary strings of length N. Print the exact number: the
answer can have thousands of digits and must not be reduced modulo anything.

Input

The input is a single integer N.

Output

Print the number of quiet binary strings of length N.

Constraints

- 1 <= N <= 20000
""",
    platform="codeforces",
    difficulty="medium",
    contest_date="2024-03-16T00:00:00",
    public_cases=(1, 3),
    hidden_cases=lambda rng: [2, 10, 44, 90, 1000, rng.randint(5000, 10000), 20000],
    render_input=lambda n: _lines(n),
    expected_output=lambda n: _lines(_no_adjacent_ones(n)),
    correct=(
        "n = int(input())\n"
        "a, b = 1, 2\n"
        "for _ in range(n - 1):\n"
        "    a, b = b, a + b\n"
        "print(b)\n"
    ),
    # The contest reflex of reducing modulo 1e9+7 is wrong once the count exceeds it.
    wrong=(
        "n = int(input())\n"
        "MOD = 10**9 + 7\n"
        "a, b = 1, 2\n"
        "for _ in range(n - 1):\n"
        "    a, b = b, (a + b) % MOD\n"
        "print(b)\n"
    ),
)


# ----------------------------------------------------------------- longest climb (naive TLEs)


def _lis_strict(values: list[int]) -> int:
    tails: list[int] = []
    for v in values:
        i = bisect_left(tails, v)
        if i == len(tails):
            tails.append(v)
        else:
            tails[i] = v
    return len(tails)


def _climb_cases(rng: random.Random) -> list[list[int]]:
    cases = [[5], [4, 4, 4, 4], [1, 2, 2, 3, 3, 4], [9, 8, 7, 1, 2]]
    cases.append([rng.randint(1, 20) for _ in range(300)])  # many repeats
    cases.append([rng.randint(1, 10**9) for _ in range(2000)])
    # Last, so a slow solution spends its time limit only once (grading stops at a failure).
    cases.append([rng.randint(1, 10**6) for _ in range(30_000)])
    return cases


LONGEST_CLIMB = BuiltinProblem(
    id="builtin_longest_climb",
    title="Longest Climb",
    body="""
A hiker looks at the heights H_1, H_2, ..., H_N of N peaks in the order they appear on a trail.
She wants to pick some of the peaks, keeping their order along the trail, so that every picked
peak is strictly higher than the previously picked one.

Print the largest number of peaks she can pick.

Input

N
H_1 H_2 ... H_N

Output

Print the answer as an integer.

Constraints

- 1 <= N <= 2 * 10^5
- 1 <= H_i <= 10^9
- All input values are integers.
""",
    platform="atcoder",
    difficulty="hard",
    contest_date="2024-04-06T00:00:00",
    public_cases=([3, 1, 4, 1, 5, 9, 2, 6], [10, 20, 30]),
    hidden_cases=_climb_cases,
    render_input=lambda h: _lines(len(h), " ".join(map(str, h))),
    expected_output=lambda h: _lines(_lis_strict(h)),
    correct=(
        "from bisect import bisect_left\n"
        "import sys\n"
        "data = sys.stdin.read().split()\n"
        "n = int(data[0])\n"
        "tails = []\n"
        "for v in map(int, data[1:1 + n]):\n"
        "    i = bisect_left(tails, v)\n"
        "    if i == len(tails):\n"
        "        tails.append(v)\n"
        "    else:\n"
        "        tails[i] = v\n"
        "print(len(tails))\n"
    ),
    # bisect_right counts equal heights as a climb (non-strict).
    wrong=(
        "from bisect import bisect_right\n"
        "import sys\n"
        "data = sys.stdin.read().split()\n"
        "n = int(data[0])\n"
        "tails = []\n"
        "for v in map(int, data[1:1 + n]):\n"
        "    i = bisect_right(tails, v)\n"
        "    if i == len(tails):\n"
        "        tails.append(v)\n"
        "    else:\n"
        "        tails[i] = v\n"
        "print(len(tails))\n"
    ),
    # Quadratic DP: right on every test, far too slow for N = 30000.
    slow=(
        "n = int(input())\n"
        "h = list(map(int, input().split()))\n"
        "best = [1] * n\n"
        "for i in range(n):\n"
        "    for j in range(i):\n"
        "        if h[j] < h[i] and best[j] + 1 > best[i]:\n"
        "            best[i] = best[j] + 1\n"
        "print(max(best))\n"
    ),
)


# --------------------------------------------------------------------------- shortest route


Graph = tuple[int, list[tuple[int, int, int]]]  # (N, roads (u, v, w))


def _dijkstra(graph: Graph) -> int:
    n, roads = graph
    adjacency: list[list[tuple[int, int]]] = [[] for _ in range(n + 1)]
    for u, v, w in roads:
        adjacency[u].append((v, w))
        adjacency[v].append((u, w))
    dist = [None] * (n + 1)
    heap = [(0, 1)]
    while heap:
        d, u = heapq.heappop(heap)
        if dist[u] is not None:
            continue
        dist[u] = d
        for v, w in adjacency[u]:
            if dist[v] is None:
                heapq.heappush(heap, (d + w, v))
    return -1 if dist[n] is None else dist[n]


def _bellman_ford(graph: Graph) -> int:
    """Independent check of the reference on small graphs (used at build time)."""
    n, roads = graph
    inf = float("inf")
    dist = [inf] * (n + 1)
    dist[1] = 0
    for _ in range(n):
        for u, v, w in roads:
            dist[v] = min(dist[v], dist[u] + w)
            dist[u] = min(dist[u], dist[v] + w)
    return -1 if dist[n] == inf else int(dist[n])


def _random_graph(rng: random.Random, n: int, m: int, max_w: int) -> Graph:
    roads = [(rng.randint(1, n), rng.randint(1, n), rng.randint(1, max_w)) for _ in range(m)]
    return n, roads


def _route_cases(rng: random.Random) -> list[Graph]:
    cases: list[Graph] = [
        (2, []),  # unreachable
        (3, [(3, 2, 4), (2, 1, 5)]),  # only usable against the listed direction
        # The answer (3e9) does not fit in 32 bits.
        (5, [(1, 2, 10**9), (2, 3, 10**9), (3, 4, 10**9), (4, 5, 10**9), (1, 3, 10**9)]),
        _random_graph(rng, 8, 12, 20),
        _random_graph(rng, 50, 120, 1000),
        _random_graph(rng, 5000, 15_000, 10**9),
    ]
    for graph in cases:
        if graph[0] <= 50:
            assert _dijkstra(graph) == _bellman_ford(graph), graph
    return cases


def _route_input(graph: Graph) -> str:
    n, roads = graph
    return _lines(f"{n} {len(roads)}", *(f"{u} {v} {w}" for u, v, w in roads))


SHORTEST_ROUTE = BuiltinProblem(
    id="builtin_shortest_route",
    title="Shortest Route",
    body="""
There are N towns numbered 1 to N and M roads. Road i connects towns U_i and V_i in both
directions and is W_i kilometres long. Several roads may connect the same pair of towns, and a
road may connect a town with itself.

Print the length of the shortest route from town 1 to town N, or -1 if town N cannot be reached.

Input

N M
U_1 V_1 W_1
...
U_M V_M W_M

Output

Print the answer as an integer.

Constraints

- 2 <= N <= 10^5
- 0 <= M <= 2 * 10^5
- 1 <= U_i, V_i <= N
- 1 <= W_i <= 10^9
- All input values are integers.
""",
    platform="codeforces",
    difficulty="hard",
    contest_date="2024-04-20T00:00:00",
    public_cases=((4, [(1, 2, 1), (2, 4, 5), (1, 3, 2), (3, 4, 1)]), (3, [(1, 2, 7)])),
    hidden_cases=_route_cases,
    render_input=_route_input,
    expected_output=lambda g: _lines(_dijkstra(g)),
    correct=(
        "import sys, heapq\n"
        "def main():\n"
        "    data = sys.stdin.buffer.read().split()\n"
        "    n, m = int(data[0]), int(data[1])\n"
        "    adj = [[] for _ in range(n + 1)]\n"
        "    for i in range(m):\n"
        "        u, v, w = int(data[2 + 3 * i]), int(data[3 + 3 * i]), int(data[4 + 3 * i])\n"
        "        adj[u].append((v, w))\n"
        "        adj[v].append((u, w))\n"
        "    dist = [-1] * (n + 1)\n"
        "    heap = [(0, 1)]\n"
        "    while heap:\n"
        "        d, u = heapq.heappop(heap)\n"
        "        if dist[u] != -1:\n"
        "            continue\n"
        "        dist[u] = d\n"
        "        for v, w in adj[u]:\n"
        "            if dist[v] == -1:\n"
        "                heapq.heappush(heap, (d + w, v))\n"
        "    print(dist[n])\n"
        "main()\n"
    ),
    # Treats the roads as one-way (U -> V only).
    wrong=(
        "import sys, heapq\n"
        "data = sys.stdin.read().split()\n"
        "n, m = int(data[0]), int(data[1])\n"
        "adj = [[] for _ in range(n + 1)]\n"
        "for i in range(m):\n"
        "    u, v, w = int(data[2 + 3 * i]), int(data[3 + 3 * i]), int(data[4 + 3 * i])\n"
        "    adj[u].append((v, w))\n"
        "dist = [-1] * (n + 1)\n"
        "heap = [(0, 1)]\n"
        "while heap:\n"
        "    d, u = heapq.heappop(heap)\n"
        "    if dist[u] != -1:\n"
        "        continue\n"
        "    dist[u] = d\n"
        "    for v, w in adj[u]:\n"
        "        if dist[v] == -1:\n"
        "            heapq.heappush(heap, (d + w, v))\n"
        "print(dist[n])\n"
    ),
)


PROBLEMS = (
    DEMO_STDIN,
    TEMPERATURE_SWING,
    TRAVEL_TIME,
    BINARY_STRINGS,
    LONGEST_CLIMB,
    SHORTEST_ROUTE,
)

"""Built-in functional problems (LeetCode style, starter code + method), written for lcb-grid.

Starter code leaves ``List`` unimported, as LiveCodeBench's LeetCode rows do: the grader's
implicit import prelude is part of what these problems exercise.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections import Counter
from itertools import combinations

from lcb.builtin.model import BuiltinProblem, functional_io, starter


def _solution(body: str) -> str:
    """A ``class Solution`` program from a method body written at class level."""
    return "class Solution:\n" + body


# --------------------------------------------------------------------------- demo: two sum


def _two_sum(nums: list[int], target: int) -> list[int]:
    seen: dict[int, int] = {}
    for j, x in enumerate(nums):
        if target - x in seen:
            return [seen[target - x], j]
        seen[x] = j
    raise ValueError("no pair")


def _unique_pair_case(rng: random.Random, n: int) -> tuple[list[int], int]:
    while True:
        nums = rng.sample(range(-10**9, 10**9), n)
        i, j = sorted(rng.sample(range(n), 2))
        target = nums[i] + nums[j]
        values = set(nums)
        pairs = sum(1 for x in nums if target - x in values and target - x != x)
        if pairs == 2:  # the pair (i, j) seen from both ends: the answer is unique
            return nums, target


DEMO_FUNCTIONAL = BuiltinProblem(
    id="demo_functional",
    title="pair-with-target-sum",
    body="""
You are given an integer array nums and an integer target.

Exactly one pair of different positions i < j satisfies nums[i] + nums[j] == target. Return the
two positions as a list [i, j] with i < j. The same element may not be used twice.
""",
    platform="leetcode",
    difficulty="easy",
    contest_date="2024-01-13T00:00:00",
    public_cases=(([2, 7, 11, 15], 9), ([1, 5, 8], 13)),
    hidden_cases=lambda rng: [
        ([3, 2, 4], 6),
        ([3, 3], 6),
        ([-1, -2, -3, -4, -5], -8),
        ([0, 4, 3, 0], 0),
        _unique_pair_case(rng, 50),
        _unique_pair_case(rng, 2000),
    ],
    **functional_io(_two_sum),
    correct=_solution(
        "    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
        "        seen = {}\n"
        "        for j, x in enumerate(nums):\n"
        "            if target - x in seen:\n"
        "                return [seen[target - x], j]\n"
        "            seen[x] = j\n"
        "        return []\n"
    ),
    # Lets an element pair with itself.
    wrong=_solution(
        "    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
        "        for i in range(len(nums)):\n"
        "            for j in range(i, len(nums)):\n"
        "                if nums[i] + nums[j] == target:\n"
        "                    return [i, j]\n"
        "        return []\n"
    ),
    starter_code=starter("twoSum(self, nums: List[int], target: int) -> List[int]"),
    func_name="twoSum",
    params=("nums", "target"),
)


# --------------------------------------------------------------------------- count prefixed


def _count_prefixed(words: list[str], pref: str) -> int:
    return sum(1 for w in words if w.startswith(pref))


def _prefixed_cases(rng: random.Random) -> list[tuple[list[str], str]]:
    def word(k: int) -> str:
        return "".join(rng.choice("ab") for _ in range(k))

    cases = [(["trap", "apt", "ap"], "ap"), (["a"], "ab"), (["abc", "abc"], "abc"), (["xy"], "y")]
    for n in (20, 500):
        cases.append(([word(rng.randint(1, 6)) for _ in range(n)], word(2)))
    return cases


COUNT_PREFIXED = BuiltinProblem(
    id="builtin_count_prefixed",
    title="count-words-with-prefix",
    body="""
You are given an array of strings words and a string pref.

Return the number of strings in words that start with pref.

Constraints:

1 <= words.length <= 1000
1 <= words[i].length, pref.length <= 100
words[i] and pref consist of lowercase English letters.
""",
    platform="leetcode",
    difficulty="easy",
    contest_date="2024-02-10T00:00:00",
    public_cases=((["apple", "apply", "banana", "ape"], "ap"), (["leet", "code"], "z")),
    hidden_cases=_prefixed_cases,
    **functional_io(_count_prefixed),
    correct=_solution(
        "    def countPrefixed(self, words: List[str], pref: str) -> int:\n"
        "        return sum(1 for w in words if w.startswith(pref))\n"
    ),
    # Counts words that contain pref anywhere.
    wrong=_solution(
        "    def countPrefixed(self, words: List[str], pref: str) -> int:\n"
        "        return sum(1 for w in words if pref in w)\n"
    ),
    starter_code=starter("countPrefixed(self, words: List[str], pref: str) -> int"),
    func_name="countPrefixed",
    params=("words", "pref"),
)


# --------------------------------------------------------------------------- k-th distinct


def _kth_distinct(arr: list[str], k: int) -> str:
    counts = Counter(arr)
    once = [s for s in arr if counts[s] == 1]
    return once[k - 1] if k <= len(once) else ""


def _kth_cases(rng: random.Random) -> list[tuple[list[str], int]]:
    cases = [(["aaa", "aa", "a"], 1), (["a", "b", "a"], 3), (["x", "x"], 1), (["q"], 1)]
    pool = ["ab", "ba", "abc", "c", "cab", "b", "a", "bb"]
    for n in (12, 300):
        arr = [rng.choice(pool) + str(rng.randint(0, n // 3)) for _ in range(n)]
        cases.append((arr, rng.randint(1, 4)))
    return cases


KTH_DISTINCT = BuiltinProblem(
    id="builtin_kth_distinct",
    title="kth-string-seen-once",
    body="""
A string is lonely in an array if it occurs in the array exactly once.

Given an array of strings arr and an integer k, return the k-th lonely string of arr, counting
in the order the strings appear in arr. If arr has fewer than k lonely strings, return an
empty string "".

Constraints:

1 <= k <= arr.length <= 1000
1 <= arr[i].length <= 5
arr[i] consists of lowercase English letters and digits.
""",
    platform="leetcode",
    difficulty="easy",
    contest_date="2024-02-24T00:00:00",
    public_cases=((["d", "b", "c", "b", "c", "a"], 2), (["p", "q"], 3)),
    hidden_cases=_kth_cases,
    **functional_io(_kth_distinct),
    correct=_solution(
        "    def kthDistinct(self, arr: List[str], k: int) -> str:\n"
        "        counts = {}\n"
        "        for s in arr:\n"
        "            counts[s] = counts.get(s, 0) + 1\n"
        "        for s in arr:\n"
        "            if counts[s] == 1:\n"
        "                k -= 1\n"
        "                if k == 0:\n"
        "                    return s\n"
        "        return ''\n"
    ),
    # Removes duplicates instead of dropping repeated strings.
    wrong=_solution(
        "    def kthDistinct(self, arr: List[str], k: int) -> str:\n"
        "        unique = list(dict.fromkeys(arr))\n"
        "        return unique[k - 1] if k <= len(unique) else ''\n"
    ),
    starter_code=starter("kthDistinct(self, arr: List[str], k: int) -> str"),
    func_name="kthDistinct",
    params=("arr", "k"),
)


# --------------------------------------------------------------------------- palindrome anagram


def _can_form_palindrome(s: str) -> bool:
    return sum(c % 2 for c in Counter(s).values()) <= 1


def _palindrome_cases(rng: random.Random) -> list[tuple[str]]:
    half = "".join(rng.choice("abcdefghij") for _ in range(5000))
    shuffled = list(half + half[::-1] + "z")
    rng.shuffle(shuffled)
    return [
        ("a",),
        ("ab",),
        ("aabb",),
        ("abcabcd",),
        ("".join(shuffled),),
        ("".join(rng.choice("xyz") for _ in range(999)) + "qq",),
    ]


PALINDROME_ANAGRAM = BuiltinProblem(
    id="builtin_palindrome_anagram",
    title="rearrange-into-palindrome",
    body="""
Given a string s of lowercase English letters, return true if its letters can be rearranged
to form a palindrome (a string that reads the same forwards and backwards), and false
otherwise.

Constraints:

1 <= s.length <= 10^5
s consists of lowercase English letters.
""",
    platform="leetcode",
    difficulty="easy",
    contest_date="2024-03-09T00:00:00",
    public_cases=(("carrace",), ("code",)),
    hidden_cases=_palindrome_cases,
    **functional_io(_can_form_palindrome),
    correct=_solution(
        "    def canFormPalindrome(self, s: str) -> bool:\n"
        "        odd = set()\n"
        "        for ch in s:\n"
        "            odd ^= {ch}\n"
        "        return len(odd) <= 1\n"
    ),
    # Checks whether s already is a palindrome.
    wrong=_solution(
        "    def canFormPalindrome(self, s: str) -> bool:\n"
        "        return s == s[::-1]\n"
    ),
    starter_code=starter("canFormPalindrome(self, s: str) -> bool"),
    func_name="canFormPalindrome",
    params=("s",),
)


# --------------------------------------------------------------------------- merge intervals


def _merge(intervals: list[list[int]]) -> list[list[int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _merge_cases(rng: random.Random) -> list[tuple[list[list[int]]]]:
    cases = [([[1, 4], [4, 5]],), ([[5, 6], [1, 2]],), ([[1, 10], [2, 3], [4, 12]],), ([[7, 7]],)]
    for n in (30, 1000):
        intervals = []
        for _ in range(n):
            a = rng.randint(0, 5 * n)
            intervals.append([a, a + rng.randint(0, 6)])
        cases.append((intervals,))
    return cases


MERGE_INTERVALS = BuiltinProblem(
    id="builtin_merge_intervals",
    title="merge-touching-intervals",
    body="""
You are given an array intervals where intervals[i] = [start_i, end_i] is a closed interval.

Merge every group of intervals that overlap (two intervals that share even a single point,
such as [1, 4] and [4, 5], overlap) and return the merged intervals sorted by their start.

Constraints:

1 <= intervals.length <= 10^4
0 <= start_i <= end_i <= 10^5
""",
    platform="leetcode",
    difficulty="medium",
    contest_date="2024-03-23T00:00:00",
    public_cases=(([[1, 3], [2, 6], [8, 10], [15, 18]],), ([[2, 3]],)),
    hidden_cases=_merge_cases,
    **functional_io(_merge),
    correct=_solution(
        "    def mergeIntervals(self, intervals: List[List[int]]) -> List[List[int]]:\n"
        "        out = []\n"
        "        for s, e in sorted(intervals):\n"
        "            if out and s <= out[-1][1]:\n"
        "                out[-1][1] = max(out[-1][1], e)\n"
        "            else:\n"
        "                out.append([s, e])\n"
        "        return out\n"
    ),
    # Strict comparison: intervals that only touch stay apart.
    wrong=_solution(
        "    def mergeIntervals(self, intervals: List[List[int]]) -> List[List[int]]:\n"
        "        out = []\n"
        "        for s, e in sorted(intervals):\n"
        "            if out and s < out[-1][1]:\n"
        "                out[-1][1] = max(out[-1][1], e)\n"
        "            else:\n"
        "                out.append([s, e])\n"
        "        return out\n"
    ),
    starter_code=starter("mergeIntervals(self, intervals: List[List[int]]) -> List[List[int]]"),
    func_name="mergeIntervals",
    params=("intervals",),
)


# --------------------------------------------------------------------------- max window sum


def _max_window(nums: list[int], k: int) -> int:
    window = sum(nums[:k])
    best = window
    for i in range(k, len(nums)):
        window += nums[i] - nums[i - k]
        best = max(best, window)
    return best


def _window_cases(rng: random.Random) -> list[tuple[list[int], int]]:
    cases = [([-3, -1, -2], 1), ([-5, -4, -3, -2], 2), ([7], 1), ([1, 2, 3], 3)]
    for n in (50, 20_000):
        nums = [rng.randint(-10**4, 10**4) for _ in range(n)]
        cases.append((nums, rng.randint(1, n)))
    return cases


MAX_WINDOW_SUM = BuiltinProblem(
    id="builtin_max_window_sum",
    title="best-window-of-length-k",
    body="""
You are given an integer array nums and an integer k.

Return the largest sum of a contiguous subarray of nums whose length is exactly k.

Constraints:

1 <= k <= nums.length <= 10^5
-10^4 <= nums[i] <= 10^4
""",
    platform="leetcode",
    difficulty="medium",
    contest_date="2024-04-13T00:00:00",
    public_cases=(([1, 12, -5, -6, 50, 3], 4), ([5], 1)),
    hidden_cases=_window_cases,
    **functional_io(_max_window),
    correct=_solution(
        "    def maxWindowSum(self, nums: List[int], k: int) -> int:\n"
        "        window = sum(nums[:k])\n"
        "        best = window\n"
        "        for i in range(k, len(nums)):\n"
        "            window += nums[i] - nums[i - k]\n"
        "            best = max(best, window)\n"
        "        return best\n"
    ),
    # Starts the maximum at 0, which is wrong when every window sum is negative.
    wrong=_solution(
        "    def maxWindowSum(self, nums: List[int], k: int) -> int:\n"
        "        window = sum(nums[:k])\n"
        "        best = max(0, window)\n"
        "        for i in range(k, len(nums)):\n"
        "            window += nums[i] - nums[i - k]\n"
        "            best = max(best, window)\n"
        "        return best\n"
    ),
    starter_code=starter("maxWindowSum(self, nums: List[int], k: int) -> int"),
    func_name="maxWindowSum",
    params=("nums", "k"),
)


# --------------------------------------------------------------------------- job scheduling


def _job_profit(start: list[int], end: list[int], profit: list[int]) -> int:
    jobs = sorted(zip(end, start, profit))
    ends = [e for e, _, _ in jobs]
    best = [0] * (len(jobs) + 1)  # best[i]: best profit using the first i jobs by end time
    for i, (e, s, p) in enumerate(jobs):
        before = bisect_right(ends, s, 0, i)  # jobs ending no later than this one starts
        best[i + 1] = max(best[i], best[before] + p)
    return best[-1]


def _job_brute(start: list[int], end: list[int], profit: list[int]) -> int:
    jobs = list(zip(start, end, profit))
    best = 0
    for r in range(len(jobs) + 1):
        for chosen in combinations(sorted(jobs, key=lambda j: j[0]), r):
            if all(a[1] <= b[0] for a, b in zip(chosen, chosen[1:])):
                best = max(best, sum(j[2] for j in chosen))
    return best


Jobs = tuple[list[int], list[int], list[int]]  # (startTime, endTime, profit)


def _random_jobs(rng: random.Random, n: int, horizon: int) -> Jobs:
    start = [rng.randint(1, horizon) for _ in range(n)]
    end = [s + rng.randint(1, max(1, horizon // 4)) for s in start]
    profit = [rng.randint(1, 10**4) for _ in range(n)]
    return start, end, profit


def _job_cases(rng: random.Random) -> list[Jobs]:
    cases = [([1, 1, 1], [2, 3, 4], [5, 6, 4]), ([1, 2], [2, 3], [3, 3]), ([1], [2], [9])]
    cases += [_random_jobs(rng, 10, 20) for _ in range(2)]
    for case in cases:
        assert _job_profit(*case) == _job_brute(*case), case  # reference vs brute force
    cases.append(_random_jobs(rng, 3000, 10**6))
    return cases


JOB_SCHEDULING = BuiltinProblem(
    id="builtin_job_scheduling",
    title="most-profitable-job-plan",
    body="""
There are n jobs. Job i starts at startTime[i], ends at endTime[i] and pays profit[i].

Choose a set of jobs no two of which overlap in time and return the largest total profit. A job
that ends at time X may be followed by a job that starts at time X.

Constraints:

1 <= startTime.length == endTime.length == profit.length <= 5 * 10^4
1 <= startTime[i] < endTime[i] <= 10^9
1 <= profit[i] <= 10^4
""",
    platform="leetcode",
    difficulty="hard",
    contest_date="2024-04-27T00:00:00",
    public_cases=(([1, 2, 3, 3], [3, 4, 5, 6], [50, 10, 40, 70]), ([1, 1], [2, 3], [5, 6])),
    hidden_cases=_job_cases,
    **functional_io(_job_profit),
    correct=_solution(
        "    def maxProfit(self, startTime: List[int], endTime: List[int],"
        " profit: List[int]) -> int:\n"
        "        import bisect\n"
        "        jobs = sorted(zip(endTime, startTime, profit))\n"
        "        ends = [e for e, _, _ in jobs]\n"
        "        best = [0] * (len(jobs) + 1)\n"
        "        for i, (e, s, p) in enumerate(jobs):\n"
        "            j = bisect.bisect_right(ends, s, 0, i)\n"
        "            best[i + 1] = max(best[i], best[j] + p)\n"
        "        return best[-1]\n"
    ),
    # Greedy by earliest end time maximises the number of jobs, not the profit.
    wrong=_solution(
        "    def maxProfit(self, startTime: List[int], endTime: List[int],"
        " profit: List[int]) -> int:\n"
        "        total, free_at = 0, 0\n"
        "        for e, s, p in sorted(zip(endTime, startTime, profit)):\n"
        "            if s >= free_at:\n"
        "                total += p\n"
        "                free_at = e\n"
        "        return total\n"
    ),
    starter_code=starter(
        "maxProfit(self, startTime: List[int], endTime: List[int], profit: List[int]) -> int"
    ),
    func_name="maxProfit",
    params=("startTime", "endTime", "profit"),
)


# --------------------------------------------------------------------------- trapped water


def _trapped(height: list[int]) -> int:
    left, right = 0, len(height) - 1
    left_max = right_max = water = 0
    while left < right:
        if height[left] < height[right]:
            left_max = max(left_max, height[left])
            water += left_max - height[left]
            left += 1
        else:
            right_max = max(right_max, height[right])
            water += right_max - height[right]
            right -= 1
    return water


def _trapped_brute(height: list[int]) -> int:
    return sum(
        max(0, min(max(height[: i + 1]), max(height[i:])) - h) for i, h in enumerate(height)
    )


def _water_cases(rng: random.Random) -> list[tuple[list[int]]]:
    cases = [([4, 2, 0, 3, 2, 5],), ([5],), ([3, 0, 0, 0, 3],), ([1, 2, 3, 4],)]
    cases.append(([rng.randint(0, 9) for _ in range(200)],))
    for (height,) in cases:
        assert _trapped(height) == _trapped_brute(height), height
    cases.append(([rng.randint(0, 10**5) for _ in range(20_000)],))
    return cases


TRAPPED_WATER = BuiltinProblem(
    id="builtin_trapped_water",
    title="rain-between-walls",
    body="""
A row of walls of width 1 has heights height[0], height[1], ..., height[n - 1]. After heavy
rain, water collects wherever it is held in by higher walls on both sides.

Return the total amount of water (in unit squares) that the row holds.

Constraints:

1 <= height.length <= 2 * 10^4
0 <= height[i] <= 10^5
""",
    platform="leetcode",
    difficulty="hard",
    contest_date="2024-05-04T00:00:00",
    public_cases=(([0, 1, 0, 2, 1, 0, 1, 3, 2, 1, 2, 1],), ([2, 0, 2],)),
    hidden_cases=_water_cases,
    **functional_io(_trapped),
    correct=_solution(
        "    def trap(self, height: List[int]) -> int:\n"
        "        n = len(height)\n"
        "        right = [0] * (n + 1)\n"
        "        for i in range(n - 1, -1, -1):\n"
        "            right[i] = max(right[i + 1], height[i])\n"
        "        water = left = 0\n"
        "        for i, h in enumerate(height):\n"
        "            left = max(left, h)\n"
        "            water += min(left, right[i]) - h\n"
        "        return water\n"
    ),
    # Only counts single-cell dips between the two direct neighbours.
    wrong=_solution(
        "    def trap(self, height: List[int]) -> int:\n"
        "        return sum(max(0, min(height[i - 1], height[i + 1]) - height[i])\n"
        "                   for i in range(1, len(height) - 1))\n"
    ),
    starter_code=starter("trap(self, height: List[int]) -> int"),
    func_name="trap",
    params=("height",),
)


PROBLEMS = (
    DEMO_FUNCTIONAL,
    COUNT_PREFIXED,
    KTH_DISTINCT,
    PALINDROME_ANAGRAM,
    MERGE_INTERVALS,
    MAX_WINDOW_SUM,
    JOB_SCHEDULING,
    TRAPPED_WATER,
)

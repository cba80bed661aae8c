"""The problem families behind Code-v0's generated task set.

A family is a parameterised function-level problem: its statement, its
reference solution and its test inputs all depend on one parameter, so every
parameter value is a distinct task (a different function to write). Expected
outputs are never written by hand: `generate` runs the reference solution on
each input.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Args = tuple[Any, ...]


@dataclass(frozen=True)
class Family:
    """One parameterised problem."""

    name: str
    difficulty: str
    signature: str
    """``func(a, b)``: the function the solver must write."""
    statement: Callable[[Any], str]
    reference: Callable[[Any], str]
    inputs: Callable[[random.Random, Any], Args]
    params: tuple[Any, ...]
    edge_cases: Callable[[Any], list[Args]] = lambda p: []

    @property
    def function(self) -> str:
        return self.signature.split("(")[0]


def _ints(rng: random.Random, n: int, lo: int = -50, hi: int = 50) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def _word(rng: random.Random, letters: str = "abcde", lo: int = 1, hi: int = 6) -> str:
    return "".join(rng.choice(letters) for _ in range(rng.randint(lo, hi)))


_MIRRORS = {"": "", "lr": " and then mirrored left-to-right (each row reversed)",
            "tb": " and then mirrored top-to-bottom (the order of the rows reversed)"}


def _grid(rng: random.Random) -> list[list[int]]:
    cols = rng.randint(1, 4)
    return [[rng.randint(0, 9) for _ in range(cols)] for _ in range(rng.randint(1, 4))]


EASY = [
    Family("sum_multiples", "easy", "sum_multiples(n)",
           lambda p: f"Return the sum of all non-negative integers below n that are divisible by {p[0]} or by {p[1]} "
                     "(0 when n <= 0).",
           lambda p: f"def sum_multiples(n):\n    return sum(x for x in range(max(n, 0)) if x % {p[0]} == 0 or x % {p[1]} == 0)\n",
           lambda rng, p: (rng.randint(0, 400),),
           tuple((a, b) for a, b in [(3, 5), (2, 7), (4, 6), (5, 11), (3, 8), (6, 9), (7, 13), (2, 3), (10, 4), (9, 12)]),
           lambda p: [(0,), (-5,), (1,)]),
    Family("count_in_set", "easy", "count_in_set(s)",
           lambda p: f"Return how many characters of the string s are one of the characters in {p!r} (case-sensitive).",
           lambda p: f"def count_in_set(s):\n    return sum(1 for c in s if c in {p!r})\n",
           lambda rng, p: (_word(rng, string.ascii_letters + string.digits + " .,!?", 0, 30),),
           ("aeiou", "AEIOU", "0123456789", "xyz", ".,!?", " ", "aA", "bcd", "qwerty", "Zz9"),
           lambda p: [("",)]),
    Family("clamp_all", "easy", "clamp_all(xs)",
           lambda p: f"Return a new list where every integer of xs is clamped to the range [{p[0]}, {p[1]}] "
                     f"(values below {p[0]} become {p[0]}, values above {p[1]} become {p[1]}).",
           lambda p: f"def clamp_all(xs):\n    return [min(max(x, {p[0]}), {p[1]}) for x in xs]\n",
           lambda rng, p: (_ints(rng, rng.randint(0, 12), -100, 100),),
           ((0, 10), (-5, 5), (1, 1), (-20, 0), (3, 30), (-1, 50), (10, 90), (-100, -50), (7, 8), (0, 255)),
           lambda p: [([],)]),
    Family("power_sum", "easy", "power_sum(xs)",
           lambda p: f"Return the sum of x ** {p} over the integers x in the list xs (0 for an empty list).",
           lambda p: f"def power_sum(xs):\n    return sum(x ** {p} for x in xs)\n",
           lambda rng, p: (_ints(rng, rng.randint(0, 8), -9, 9),),
           (0, 1, 2, 3, 4, 5, 6, 7, 8, 9),
           lambda p: [([],), ([0],)]),
    Family("caesar", "easy", "caesar(text)",
           lambda p: f"Shift every ASCII letter of text {p} places forward in the alphabet, wrapping from z to a "
                     "(and Z to A) and keeping its case; leave every other character as it is.",
           lambda p: ("def caesar(text):\n    out = []\n    for c in text:\n"
                      "        if 'a' <= c <= 'z':\n"
                      f"            out.append(chr((ord(c) - 97 + {p}) % 26 + 97))\n"
                      "        elif 'A' <= c <= 'Z':\n"
                      f"            out.append(chr((ord(c) - 65 + {p}) % 26 + 65))\n"
                      "        else:\n            out.append(c)\n    return ''.join(out)\n"),
           lambda rng, p: (_word(rng, string.ascii_letters + " -!1", 0, 20),),
           (1, 2, 3, 5, 7, 11, 13, 17, 20, 25),
           lambda p: [("",), ("zZ",)]),
    Family("repeat_chars", "easy", "repeat_chars(s)",
           lambda p: f"Return the string s with every character repeated {p} times in place "
                     f"(for example 'ab' becomes {''.join(c * p for c in 'ab')!r}).",
           lambda p: f"def repeat_chars(s):\n    return ''.join(c * {p} for c in s)\n",
           lambda rng, p: (_word(rng, string.ascii_lowercase + " ", 0, 10),),
           (2, 3, 4, 5, 6, 7, 8, 9, 10, 11),
           lambda p: [("",)]),
    Family("filter_residue", "easy", "filter_residue(xs)",
           lambda p: f"Return, in their original order, the integers x of xs with x % {p[0]} == {p[1]} "
                     "(Python's % operator, so negative numbers follow Python's rule).",
           lambda p: f"def filter_residue(xs):\n    return [x for x in xs if x % {p[0]} == {p[1]}]\n",
           lambda rng, p: (_ints(rng, rng.randint(0, 15), -60, 60),),
           ((2, 0), (2, 1), (3, 1), (3, 2), (4, 3), (5, 0), (6, 5), (7, 3), (9, 4), (10, 7)),
           lambda p: [([],)]),
    Family("digit_sum_base", "easy", "digit_sum_base(n)",
           lambda p: f"Return the sum of the digits of the non-negative integer n written in base {p}.",
           lambda p: (f"def digit_sum_base(n):\n    total = 0\n    while n:\n        total += n % {p}\n"
                      f"        n //= {p}\n    return total\n"),
           lambda rng, p: (rng.randint(0, 10**6),),
           (2, 3, 4, 5, 6, 7, 8, 9, 12, 16),
           lambda p: [(0,), (1,)]),
]

MEDIUM = [
    Family("compress_runs", "medium", "compress_runs(s)",
           lambda p: f"Run-length encode s: every maximal run of the same character that is at least {p} long "
                     "becomes the run's length followed by the character; shorter runs stay as they are. "
                     f"For example with runs of 'a' * {p} and 'b': {p}a then b.",
           lambda p: ("def compress_runs(s):\n    out, i = [], 0\n    while i < len(s):\n        j = i\n"
                      "        while j < len(s) and s[j] == s[i]:\n            j += 1\n"
                      f"        out.append(f'{{j - i}}{{s[i]}}' if j - i >= {p} else s[i:j])\n"
                      "        i = j\n    return ''.join(out)\n"),
           lambda rng, p: ("".join(rng.choice("abc") * rng.randint(1, p + 2) for _ in range(rng.randint(0, 6))),),
           (2, 3, 4, 5, 6, 7, 8, 9, 10, 12),
           lambda p: [("",), ("a",)]),
    Family("top_words", "medium", "top_words(text)",
           lambda p: f"Split text on whitespace and return the {p} most frequent words as a list, most frequent "
                     "first; break ties alphabetically; return fewer when there are fewer distinct words.",
           lambda p: ("def top_words(text):\n    counts = {}\n    for w in text.split():\n"
                      "        counts[w] = counts.get(w, 0) + 1\n"
                      f"    return sorted(counts, key=lambda w: (-counts[w], w))[:{p}]\n"),
           lambda rng, p: (" ".join(_word(rng, "abc", 1, 2) for _ in range(rng.randint(0, 25))),),
           (1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
           lambda p: [("",)]),
    Family("rotate_grid", "medium", "rotate_grid(grid)",
           lambda p: f"grid is a rectangular list of lists. Return a new list of lists: grid rotated {90 * p[0]} "
                     f"degrees clockwise{_MIRRORS[p[1]]}.",
           lambda p: ("def rotate_grid(grid):\n    g = [list(r) for r in grid]\n"
                      f"    for _ in range({p[0]}):\n        g = [list(r) for r in zip(*g[::-1])]\n"
                      + {"": "", "lr": "    g = [r[::-1] for r in g]\n", "tb": "    g = g[::-1]\n"}[p[1]]
                      + "    return g\n"),
           lambda rng, p: (_grid(rng),),
           ((1, ""), (2, ""), (3, ""), (0, "lr"), (1, "lr"), (2, "lr"), (3, "lr"), (0, "tb"), (1, "tb"), (3, "tb")),
           lambda p: [([[1]],), ([[1, 2, 3]],)]),
    Family("balanced", "medium", "balanced(s)",
           lambda p: f"Return True when the brackets of s are balanced, where the bracket pairs are "
                     f"{', '.join(p[i:i + 2] for i in range(0, len(p), 2))}; every other character is ignored.",
           lambda p: (f"def balanced(s):\n    pairs = {{{', '.join(repr(p[i + 1]) + ': ' + repr(p[i]) for i in range(0, len(p), 2))}}}\n"
                      "    opens, stack = set(pairs.values()), []\n    for c in s:\n"
                      "        if c in opens:\n            stack.append(c)\n"
                      "        elif c in pairs:\n            if not stack or stack.pop() != pairs[c]:\n"
                      "                return False\n    return not stack\n"),
           lambda rng, p: (_word(rng, p + "xy", 0, 12),),
           ("()", "[]", "{}", "<>", "()[]", "(){}", "[]<>", "()[]{}", "()<>", "[]{}<>"),
           lambda p: [("",), (p[0],), (p[1] + p[0],)]),
    Family("chunk_sums", "medium", "chunk_sums(xs)",
           lambda p: f"Split the list xs into consecutive chunks of {p} elements (the last chunk may be shorter) "
                     "and return the list of the chunks' sums.",
           lambda p: f"def chunk_sums(xs):\n    return [sum(xs[i:i + {p}]) for i in range(0, len(xs), {p})]\n",
           lambda rng, p: (_ints(rng, rng.randint(0, 3 * p + 2), -20, 20),),
           (1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
           lambda p: [([],)]),
    Family("longest_run_above", "medium", "longest_run_above(xs)",
           lambda p: f"Return the length of the longest stretch of consecutive elements of xs that are all "
                     f"strictly greater than {p} (0 when there is none).",
           lambda p: (f"def longest_run_above(xs):\n    best = cur = 0\n    for x in xs:\n"
                      f"        cur = cur + 1 if x > {p} else 0\n        best = max(best, cur)\n    return best\n"),
           lambda rng, p: (_ints(rng, rng.randint(0, 20), p - 10, p + 10),),
           (-5, -1, 0, 1, 2, 3, 5, 8, 10, 20),
           lambda p: [([],)]),
    Family("to_base", "medium", "to_base(n)",
           lambda p: f"Return the integer n written in base {p} as a string, using the digits 0-9 then lowercase "
                     "letters, with a leading '-' for negative numbers and '0' for zero.",
           lambda p: ("def to_base(n):\n    digits = '0123456789abcdefghijklmnopqrstuvwxyz'\n"
                      "    if n == 0:\n        return '0'\n    sign, n, out = '-' if n < 0 else '', abs(n), ''\n"
                      f"    while n:\n        out = digits[n % {p}] + out\n        n //= {p}\n    return sign + out\n"),
           lambda rng, p: (rng.randint(-10**5, 10**5),),
           (2, 3, 5, 7, 8, 11, 16, 20, 32, 36),
           lambda p: [(0,), (-1,), (p,)]),
    Family("window_max", "medium", "window_max(xs)",
           lambda p: f"Return the list of the maxima of every window of {p} consecutive elements of xs, in order "
                     f"(an empty list when xs has fewer than {p} elements).",
           lambda p: f"def window_max(xs):\n    return [max(xs[i:i + {p}]) for i in range(len(xs) - {p} + 1)]\n",
           lambda rng, p: (_ints(rng, rng.randint(0, 3 * p), -30, 30),),
           (1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
           lambda p: [([],)]),
]


def _graph(rng: random.Random, _p: Any) -> Args:
    n = rng.randint(1, 7)
    edges = [(rng.randrange(n), rng.randrange(n), rng.randint(1, 9)) for _ in range(rng.randint(0, 2 * n))]
    return (n, edges)


HARD = [
    Family("gap_subsequence", "hard", "gap_subsequence(xs)",
           lambda p: f"Return the length of the longest subsequence of xs (not necessarily contiguous) in which "
                     f"every element is at least {p} larger than the element before it.",
           lambda p: ("def gap_subsequence(xs):\n    best = [1] * len(xs)\n    for i in range(len(xs)):\n"
                      f"        for j in range(i):\n            if xs[i] - xs[j] >= {p}:\n"
                      "                best[i] = max(best[i], best[j] + 1)\n    return max(best, default=0)\n"),
           lambda rng, p: (_ints(rng, rng.randint(0, 14), -20, 40),),
           (1, 2, 3, 4, 5, 6, 7, 9, 12, 15),
           lambda p: [([],), ([5],)]),
    Family("weighted_edit", "hard", "weighted_edit(a, b)",
           lambda p: f"Return the minimum cost to turn string a into string b, where inserting a character costs "
                     f"{p[0]}, deleting one costs {p[1]} and replacing one with another costs {p[2]}.",
           lambda p: ("def weighted_edit(a, b):\n    n, m = len(a), len(b)\n"
                      f"    d = [[0] * (m + 1) for _ in range(n + 1)]\n    for i in range(1, n + 1):\n        d[i][0] = i * {p[1]}\n"
                      f"    for j in range(1, m + 1):\n        d[0][j] = j * {p[0]}\n"
                      "    for i in range(1, n + 1):\n        for j in range(1, m + 1):\n"
                      f"            sub = d[i - 1][j - 1] + (0 if a[i - 1] == b[j - 1] else {p[2]})\n"
                      f"            d[i][j] = min(sub, d[i][j - 1] + {p[0]}, d[i - 1][j] + {p[1]})\n    return d[n][m]\n"),
           lambda rng, p: (_word(rng, "abc", 0, 7), _word(rng, "abc", 0, 7)),
           ((1, 1, 1), (1, 1, 2), (2, 1, 1), (1, 2, 1), (3, 3, 1), (1, 1, 5), (2, 3, 4), (5, 1, 2), (1, 4, 3), (2, 2, 3)),
           lambda p: [("", ""), ("abc", "")]),
    Family("grid_paths", "hard", "grid_paths(grid)",
           lambda p: f"grid is a list of equal-length strings of '.' (free) and '#' (wall). Count the paths from "
                     "the top-left to the bottom-right cell that move only right or down through free cells, and "
                     f"return the count modulo {p} (0 when either corner is a wall).",
           lambda p: ("def grid_paths(grid):\n    rows, cols = len(grid), len(grid[0])\n"
                      "    ways = [[0] * cols for _ in range(rows)]\n    for r in range(rows):\n        for c in range(cols):\n"
                      "            if grid[r][c] == '#':\n                continue\n            if r == c == 0:\n"
                      "                ways[r][c] = 1\n                continue\n"
                      "            up = ways[r - 1][c] if r else 0\n            left = ways[r][c - 1] if c else 0\n"
                      f"            ways[r][c] = (up + left) % {p}\n    return ways[-1][-1] % {p}\n"),
           lambda rng, p: ([("".join(rng.choice("....#") for _ in range(w))) for w in [rng.randint(1, 8)]
                            for _ in range(rng.randint(1, 8))],),
           (7, 10, 13, 97, 101, 1000, 1009, 65537, 10**9 + 7, 998244353),
           lambda p: [(["."],), (["#"],)]),
    Family("coin_ways", "hard", "coin_ways(amount)",
           lambda p: f"Return the number of different multisets of coins with values {list(p)} (each value usable "
                     "any number of times) that add up to amount; there is 1 way to make 0.",
           lambda p: (f"def coin_ways(amount):\n    ways = [1] + [0] * max(amount, 0)\n    for coin in {list(p)}:\n"
                      "        for total in range(coin, amount + 1):\n            ways[total] += ways[total - coin]\n"
                      "    return ways[amount] if amount >= 0 else 0\n"),
           lambda rng, p: (rng.randint(0, 120),),
           ((1, 2, 5), (2, 3), (1, 5, 10, 25), (3, 7), (2, 5, 9), (1, 3, 4), (4, 6, 9), (5, 7, 11), (2, 3, 5, 7), (6, 10, 15)),
           lambda p: [(0,), (1,)]),
    Family("shortest_paths", "hard", "shortest_paths(n, edges)",
           lambda p: f"There are n nodes 0..n-1 and a list of directed edges (u, v, w) with positive weights w. "
                     f"Return the list of shortest distances from node {p[0]} % n to every node, using {p[1]!r} for "
                     "nodes that cannot be reached.",
           lambda p: ("import heapq\n\ndef shortest_paths(n, edges):\n    adj = [[] for _ in range(n)]\n"
                      "    for u, v, w in edges:\n        adj[u].append((v, w))\n"
                      f"    start = {p[0]} % n\n    dist = [None] * n\n    heap = [(0, start)]\n"
                      "    while heap:\n        d, u = heapq.heappop(heap)\n        if dist[u] is not None:\n            continue\n"
                      "        dist[u] = d\n        for v, w in adj[u]:\n            if dist[v] is None:\n"
                      "                heapq.heappush(heap, (d + w, v))\n"
                      f"    return [{p[1]!r} if d is None else d for d in dist]\n"),
           _graph,
           ((0, -1), (0, None), (1, -1), (1, None), (2, -1), (0, 'inf'), (3, None), (2, 0), (1, 'x'), (4, -1)),
           lambda p: [(1, []), (2, [(0, 1, 5)])]),
    Family("bounded_knapsack", "hard", "bounded_knapsack(items, capacity)",
           lambda p: f"items is a list of (weight, value) pairs with positive weights. Each item may be taken at most "
                     f"{p} time{'s' if p > 1 else ''}. Return the largest total value whose total weight is at most capacity.",
           lambda p: ("def bounded_knapsack(items, capacity):\n    best = [0] * (capacity + 1)\n"
                      f"    for weight, value in items:\n        for _ in range({p}):\n"
                      "            for c in range(capacity, weight - 1, -1):\n"
                      "                best[c] = max(best[c], best[c - weight] + value)\n    return best[capacity]\n"),
           lambda rng, p: ([(rng.randint(1, 9), rng.randint(0, 20)) for _ in range(rng.randint(0, 6))], rng.randint(0, 30)),
           (1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
           lambda p: [([], 10), ([(5, 9)], 4)]),
    Family("primes_in_class", "hard", "primes_in_class(n)",
           lambda p: f"Return how many primes p <= n satisfy p % {p[0]} == {p[1]}.",
           lambda p: ("def primes_in_class(n):\n    if n < 2:\n        return 0\n    sieve = bytearray([1]) * (n + 1)\n"
                      "    sieve[0] = sieve[1] = 0\n    for i in range(2, int(n ** 0.5) + 1):\n        if sieve[i]:\n"
                      "            sieve[i * i::i] = bytearray(len(range(i * i, n + 1, i)))\n"
                      f"    return sum(1 for q in range(n + 1) if sieve[q] and q % {p[0]} == {p[1]})\n"),
           lambda rng, p: (rng.randint(0, 20000),),
           ((4, 1), (4, 3), (6, 1), (6, 5), (10, 3), (10, 7), (3, 2), (8, 5), (12, 11), (5, 4)),
           lambda p: [(0,), (2,), (3,)]),
    Family("distinct_windows", "hard", "distinct_windows(s)",
           lambda p: f"Return the length of the longest substring of s that contains at most {p} distinct characters.",
           lambda p: ("def distinct_windows(s):\n    counts, left, best = {}, 0, 0\n    for right, c in enumerate(s):\n"
                      "        counts[c] = counts.get(c, 0) + 1\n"
                      f"        while len(counts) > {p}:\n            counts[s[left]] -= 1\n"
                      "            if not counts[s[left]]:\n                del counts[s[left]]\n            left += 1\n"
                      "        best = max(best, right - left + 1)\n    return best\n"),
           lambda rng, p: (_word(rng, "abcdefg"[: p + 2], 0, 25),),
           (1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
           lambda p: [("",), ("a",)]),
]

FAMILIES: list[Family] = EASY + MEDIUM + HARD

"""Small programming problems for the drafters' training text, made here from task templates
and seeded inputs, and asked the way the HumanEval benchmark asks
(specbench.data.benchmarks.HUMANEVAL_INSTRUCTION): a typed signature and a docstring whose
examples are computed by a reference solution, so each one is right. The standard library's
functions (specbench/train/prompts/code.py) teach how the target completes library code;
these teach how it solves the short self-contained exercises HumanEval asks. A made problem is
no evaluation prompt, and the corpus drops any that shares a 13-word span with one anyway.

The order is fixed by the seed, so every machine makes the same prompts and a pack finds
them again by key."""

from __future__ import annotations

import math
import random
import string
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from specbench.data.benchmarks import HUMANEVAL_INSTRUCTION

PROBLEMS = 12_000
SEED = 0
EXAMPLES = (1, 3)  # docstring examples per problem

WORDS = (
    "apple river stone cloud garden window pencil tiger orange silver planet candle forest bridge "
    "rocket lemon castle mirror engine harbor island jungle kettle ladder meadow needle ocean pepper "
    "quartz ribbon saddle tunnel violin wagon yellow zebra anchor basket cactus dragon eagle falcon"
).split()


@dataclass(frozen=True)
class Task:
    """One exercise: names it may go by, its parameters and return type as written, what the
    docstring asks, the reference solution and a maker of its arguments."""

    names: tuple[str, ...]
    params: str
    returns: str
    doc: str
    solve: Callable
    make_args: Callable[[random.Random], tuple]


def _ints(r: random.Random, low: int = -9, high: int = 20, size: tuple[int, int] = (0, 8)) -> list[int]:
    return [r.randint(low, high) for _ in range(r.randint(*size))]


def _words(r: random.Random, size: tuple[int, int] = (1, 6)) -> list[str]:
    return r.sample(WORDS, r.randint(*size))


def _sentence(r: random.Random) -> str:
    return " ".join(_words(r, (2, 6)))


def _letters(r: random.Random, size: tuple[int, int] = (0, 10), alphabet: str = "abcde") -> str:
    return "".join(r.choice(alphabet) for _ in range(r.randint(*size)))


def _running_max(values):
    out, best = [], None
    for v in values:
        best = v if best is None else max(best, v)
        out.append(best)
    return out


def _compress(text):
    out, i = [], 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        out.append(f"{text[i]}{j - i}")
        i = j
    return "".join(out)


def _is_prime(n):
    return n > 1 and all(n % d for d in range(2, math.isqrt(n) + 1))


def _longest_run(values):
    best = run = 0
    for i, v in enumerate(values):
        run = run + 1 if i and v > values[i - 1] else 1
        best = max(best, run)
    return best


TASKS: tuple[Task, ...] = (
    Task(
        ("sum_of_evens", "even_total", "add_even_numbers"),
        "numbers: List[int]",
        "int",
        "Return the sum of the even numbers in the list. An empty list sums to 0.",
        lambda xs: sum(x for x in xs if x % 2 == 0),
        lambda r: (_ints(r),),
    ),
    Task(
        ("count_vowels", "vowel_count"),
        "text: str",
        "int",
        "Count how many vowels (a, e, i, o, u, in either case) the string contains.",
        lambda s: sum(c in "aeiouAEIOU" for c in s),
        lambda r: (r.choice((str.lower, str.upper, str.title))(_sentence(r)),),
    ),
    Task(
        ("reverse_words", "flip_word_order"),
        "sentence: str",
        "str",
        "Return the words of the sentence in reverse order, separated by single spaces.",
        lambda s: " ".join(reversed(s.split())),
        lambda r: (_sentence(r),),
    ),
    Task(
        ("is_palindrome", "reads_same_backwards"),
        "text: str",
        "bool",
        "Check whether the string reads the same forwards and backwards, ignoring case.",
        lambda s: s.lower() == s.lower()[::-1],
        lambda r: (r.choice((_letters(r, (0, 6), "abc"), "Level", "noon", "Racecar")),),
    ),
    Task(
        ("running_max", "rolling_maximum", "prefix_max"),
        "numbers: List[int]",
        "List[int]",
        "Return a list whose i-th element is the largest of the first i + 1 numbers.",
        _running_max,
        lambda r: (_ints(r),),
    ),
    Task(
        ("unique_in_order", "remove_duplicates", "dedupe_keep_order"),
        "items: List[int]",
        "List[int]",
        "Remove repeated values, keeping the first occurrence of each in its original order.",
        lambda xs: list(dict.fromkeys(xs)),
        lambda r: (_ints(r, 0, 5, (0, 10)),),
    ),
    Task(
        ("second_largest", "runner_up"),
        "numbers: List[int]",
        "Optional[int]",
        "Return the second largest distinct value, or None when there are fewer than two distinct values.",
        lambda xs: sorted(set(xs))[-2] if len(set(xs)) > 1 else None,
        lambda r: (_ints(r, 0, 9, (1, 7)),),
    ),
    Task(
        ("digit_sum", "sum_digits"),
        "n: int",
        "int",
        "Return the sum of the decimal digits of n. The sign of a negative number is ignored.",
        lambda n: sum(map(int, str(abs(n)))),
        lambda r: (r.randint(-9999, 99999),),
    ),
    Task(
        ("rotate_left", "shift_items"),
        "items: List[int], k: int",
        "List[int]",
        "Rotate the list k places to the left; k may be larger than the length of the list.",
        lambda xs, k: xs[k % len(xs) :] + xs[: k % len(xs)] if xs else [],
        lambda r: (_ints(r, 0, 9, (0, 6)), r.randint(0, 8)),
    ),
    Task(
        ("capitalize_words", "title_case"),
        "sentence: str",
        "str",
        "Capitalize the first letter of every word and lowercase the rest.",
        lambda s: " ".join(w.capitalize() for w in s.split()),
        lambda r: (r.choice((str.lower, str.upper))(_sentence(r)),),
    ),
    Task(
        ("count_char", "occurrences"),
        "text: str, char: str",
        "int",
        "Return how many times the single character char occurs in text.",
        lambda s, c: s.count(c),
        lambda r: (_letters(r), r.choice("abcde")),
    ),
    Task(
        ("merge_sorted", "merge_two_lists"),
        "first: List[int], second: List[int]",
        "List[int]",
        "Merge two lists that are each sorted in ascending order into one sorted list.",
        lambda a, b: sorted(a + b),
        lambda r: (sorted(_ints(r, 0, 20, (0, 5))), sorted(_ints(r, 0, 20, (0, 5)))),
    ),
    Task(
        ("flatten", "flatten_once"),
        "nested: List[List[int]]",
        "List[int]",
        "Flatten a list of lists by one level, keeping the order of the elements.",
        lambda xss: [x for xs in xss for x in xs],
        lambda r: ([_ints(r, 0, 9, (0, 3)) for _ in range(r.randint(0, 4))],),
    ),
    Task(
        ("count_primes", "primes_below"),
        "n: int",
        "int",
        "Return how many prime numbers are strictly smaller than n.",
        lambda n: sum(_is_prime(k) for k in range(n)),
        lambda r: (r.randint(0, 60),),
    ),
    Task(
        ("is_prime", "check_prime"),
        "n: int",
        "bool",
        "Return True if n is a prime number and False otherwise.",
        _is_prime,
        lambda r: (r.randint(-3, 120),),
    ),
    Task(
        ("compress", "run_length_encode"),
        "text: str",
        "str",
        "Encode runs of the same character as the character followed by the length of the run.",
        _compress,
        lambda r: (_letters(r, (0, 10), "aab"),),
    ),
    Task(
        ("longest_word", "find_longest_word"),
        "sentence: str",
        "str",
        "Return the longest word of the sentence; if several are equally long, the first of them.",
        lambda s: max(s.split(), key=len),
        lambda r: (_sentence(r),),
    ),
    Task(
        ("common_elements", "intersection_sorted"),
        "first: List[int], second: List[int]",
        "List[int]",
        "Return the values found in both lists, sorted and without repeats.",
        lambda a, b: sorted(set(a) & set(b)),
        lambda r: (_ints(r, 0, 9), _ints(r, 0, 9)),
    ),
    Task(
        ("sort_by_length", "order_by_length"),
        "words: List[str]",
        "List[str]",
        "Sort the words by length, shortest first; words of equal length keep their order.",
        lambda ws: sorted(ws, key=len),
        lambda r: (_words(r),),
    ),
    Task(
        ("fibonacci", "fib"),
        "n: int",
        "int",
        "Return the n-th Fibonacci number, where fib(0) is 0 and fib(1) is 1.",
        lambda n: round(((1 + 5**0.5) / 2) ** n / 5**0.5),
        lambda r: (r.randint(0, 30),),
    ),
    Task(
        ("alternate_case", "zigzag_case"),
        "text: str",
        "str",
        "Return the string with letters at even positions upper-cased and the others lower-cased.",
        lambda s: "".join(c.upper() if i % 2 == 0 else c.lower() for i, c in enumerate(s)),
        lambda r: (r.choice(WORDS),),
    ),
    Task(
        ("letter_histogram", "char_frequencies"),
        "text: str",
        "Dict[str, int]",
        "Return a dictionary mapping each letter of the string to how often it occurs, ignoring spaces.",
        lambda s: dict(Counter(c for c in s if c != " ")),
        lambda r: (_letters(r, (0, 7), "abc "),),
    ),
    Task(
        ("average", "mean_value"),
        "numbers: List[float]",
        "float",
        "Return the arithmetic mean of a non-empty list of numbers.",
        lambda xs: sum(xs) / len(xs),
        lambda r: (_ints(r, 0, 10, (1, 6)),),
    ),
    Task(
        ("median", "middle_value"),
        "numbers: List[int]",
        "float",
        "Return the median of a non-empty list: the middle value once sorted, or the mean of the two middle values.",
        lambda xs: (
            float(sorted(xs)[len(xs) // 2])
            if len(xs) % 2
            else (sorted(xs)[len(xs) // 2 - 1] + sorted(xs)[len(xs) // 2]) / 2
        ),
        lambda r: (_ints(r, 0, 20, (1, 7)),),
    ),
    Task(
        ("clamp_all", "clip_values"),
        "numbers: List[int], low: int, high: int",
        "List[int]",
        "Limit every number to the range from low to high inclusive.",
        lambda xs, lo, hi: [min(max(x, lo), hi) for x in xs],
        lambda r: (_ints(r), r.randint(-3, 3), r.randint(5, 12)),
    ),
    Task(
        ("chunk", "split_into_groups"),
        "items: List[int], size: int",
        "List[List[int]]",
        "Split the list into consecutive groups of the given size; the last group may be shorter.",
        lambda xs, n: [xs[i : i + n] for i in range(0, len(xs), n)],
        lambda r: (_ints(r, 0, 9), r.randint(1, 4)),
    ),
    Task(
        ("is_anagram", "same_letters"),
        "first: str, second: str",
        "bool",
        "Check whether the two words use exactly the same letters the same number of times.",
        lambda a, b: sorted(a) == sorted(b),
        lambda r: (lambda w: (w, r.choice(("".join(r.sample(w, len(w))), r.choice(WORDS)))))(r.choice(WORDS)),
    ),
    Task(
        ("to_binary", "binary_string"),
        "n: int",
        "str",
        "Return the binary representation of a non-negative integer as a string of 0s and 1s.",
        lambda n: bin(n)[2:],
        lambda r: (r.randint(0, 300),),
    ),
    Task(
        ("word_count", "count_words"),
        "sentence: str",
        "int",
        "Return the number of words in the sentence, where words are separated by whitespace.",
        lambda s: len(s.split()),
        lambda r: (r.choice(("", "  ")) + _sentence(r),),
    ),
    Task(
        ("index_of_max", "argmax"),
        "numbers: List[int]",
        "int",
        "Return the index of the largest number; if it occurs more than once, the first index. Return -1 for an "
        "empty list.",
        lambda xs: xs.index(max(xs)) if xs else -1,
        lambda r: (_ints(r, 0, 9),),
    ),
    Task(
        ("cumulative_sum", "prefix_sums"),
        "numbers: List[int]",
        "List[int]",
        "Return the running totals of the list: the i-th element is the sum of the first i + 1 numbers.",
        lambda xs: [sum(xs[: i + 1]) for i in range(len(xs))],
        lambda r: (_ints(r),),
    ),
    Task(
        ("longest_increasing_run", "max_rising_streak"),
        "numbers: List[int]",
        "int",
        "Return the length of the longest run of consecutive strictly increasing numbers.",
        _longest_run,
        lambda r: (_ints(r, 0, 9, (0, 9)),),
    ),
    Task(
        ("product_except_self", "products_of_others"),
        "numbers: List[int]",
        "List[int]",
        "Return a list where each element is the product of all the other numbers of the input.",
        lambda xs: [math.prod(xs[:i] + xs[i + 1 :]) for i in range(len(xs))],
        lambda r: (_ints(r, 1, 6, (1, 5)),),
    ),
    Task(
        ("count_greater", "how_many_above"),
        "numbers: List[int], limit: int",
        "int",
        "Count the numbers that are strictly greater than limit.",
        lambda xs, t: sum(x > t for x in xs),
        lambda r: (_ints(r), r.randint(0, 10)),
    ),
    Task(
        ("remove_vowels", "strip_vowels"),
        "text: str",
        "str",
        "Return the string with every vowel removed; other characters stay as they are.",
        lambda s: "".join(c for c in s if c.lower() not in "aeiou"),
        lambda r: (_sentence(r),),
    ),
    Task(
        ("gcd", "greatest_common_divisor"),
        "a: int, b: int",
        "int",
        "Return the greatest common divisor of two positive integers.",
        math.gcd,
        lambda r: (r.randint(1, 90), r.randint(1, 90)),
    ),
    Task(
        ("pair_sums", "adjacent_sums"),
        "numbers: List[int]",
        "List[int]",
        "Return the sums of each pair of neighbouring numbers.",
        lambda xs: [a + b for a, b in zip(xs, xs[1:])],
        lambda r: (_ints(r),),
    ),
    Task(
        ("filter_by_prefix", "starts_with"),
        "words: List[str], prefix: str",
        "List[str]",
        "Return the words that start with the given prefix, in their original order.",
        lambda ws, p: [w for w in ws if w.startswith(p)],
        lambda r: (_words(r, (0, 8)), r.choice(string.ascii_lowercase[:8])),
    ),
    Task(
        ("caesar_shift", "shift_letters"),
        "text: str, shift: int",
        "str",
        "Shift every lowercase letter forward in the alphabet by shift places, wrapping from z to a; other "
        "characters are unchanged.",
        lambda s, k: "".join(chr((ord(c) - 97 + k) % 26 + 97) if c.islower() else c for c in s),
        lambda r: (_sentence(r), r.randint(1, 25)),
    ),
    Task(
        ("count_pairs_with_sum", "pairs_adding_to"),
        "numbers: List[int], target: int",
        "int",
        "Count the pairs of positions i < j whose numbers add up to target.",
        lambda xs, t: sum(xs[i] + xs[j] == t for i in range(len(xs)) for j in range(i + 1, len(xs))),
        lambda r: (_ints(r, 0, 6), r.randint(2, 8)),
    ),
    Task(
        ("max_difference", "largest_gap"),
        "numbers: List[int]",
        "int",
        "Return the largest value of numbers[j] - numbers[i] with i < j, or 0 if no pair gives a positive difference.",
        lambda xs: max([0] + [xs[j] - xs[i] for i in range(len(xs)) for j in range(i + 1, len(xs))]),
        lambda r: (_ints(r),),
    ),
    Task(
        ("first_repeated", "first_duplicate_char"),
        "text: str",
        "Optional[str]",
        "Return the first character that appears for the second time while reading left to right, or None.",
        lambda s: next((c for i, c in enumerate(s) if c in s[:i]), None),
        lambda r: (_letters(r, (0, 8), "abcdefg"),),
    ),
    Task(
        ("squares_of_odds", "odd_squares"),
        "numbers: List[int]",
        "List[int]",
        "Return the squares of the odd numbers of the list, in order.",
        lambda xs: [x * x for x in xs if x % 2],
        lambda r: (_ints(r),),
    ),
    Task(
        ("digits_to_words", "spell_digits"),
        "n: int",
        "str",
        "Spell out each decimal digit of a non-negative integer in English, separated by spaces.",
        lambda n: " ".join("zero one two three four five six seven eight nine".split()[int(d)] for d in str(n)),
        lambda r: (r.randint(0, 9999),),
    ),
)


def docstring_example(name: str, args: tuple, result) -> str:
    """A doctest line and its expected output (none for None, as doctest prints it)."""
    call = f"    >>> {name}({', '.join(map(repr, args))})"
    return call if result is None else f"{call}\n    {result!r}"


def problem(task: Task, r: random.Random) -> str:
    """The task as a stub: imports its types need, signature, docstring with examples."""
    name = r.choice(task.names)
    examples = []
    for _ in range(r.randint(*EXAMPLES)):
        args = task.make_args(r)
        examples.append(docstring_example(name, args, task.solve(*args)))
    typing = sorted(t for t in ("Dict", "List", "Optional") if t in task.params + task.returns)
    header = f"from typing import {', '.join(typing)}\n\n\n" if typing else ""
    body = "\n".join(examples)
    return f'{header}def {name}({task.params}) -> {task.returns}:\n    """{task.doc}\n{body}\n    """\n'


def function_problems(count: int = PROBLEMS, seed: int = SEED) -> Iterator[str]:
    """`count` stubs, tasks taken in turn, names and example inputs drawn from one seeded
    generator, each asked as HumanEval asks (repeats are dropped by the corpus)."""
    r = random.Random(seed)
    for i in range(count):
        yield f"{HUMANEVAL_INSTRUCTION}\n\n{problem(TASKS[i % len(TASKS)], r)}"

"""Grade-school math word problems for the drafters' training text, made here from templates
and seeded numbers, and asked the way the GSM8K benchmark asks
(specbench.data.benchmarks.GSM8K_INSTRUCTION), so the target's answers teach a drafter how the
target works a math problem step by step. No package here ships GSM8K's train split; a made
problem is no evaluation prompt, and the corpus drops any that shares a 13-word span with one
anyway.

Each template states a multi-step problem whose answer is a whole number (the target's answer
need not be right: a drafter learns what the target writes). The order is fixed by the seed,
so every machine makes the same prompts and a pack finds them again by key."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from specbench.data.benchmarks import GSM8K_INSTRUCTION

PROBLEMS = 20_000
SEED = 0

NAMES = (
    "Aisha Ben Carmen Diego Elena Farid Grace Hiro Ines Jamal Kira Liam Maya Noah Olga Pedro Quinn Rosa "
    "Sami Tara Uma Victor Wendy Xavier Yara Zane Amara Bruno Chloe Dmitri Esme Felix Gia Hugo Ivy Jonas "
    "Keiko Leon Mira Nils Omar Priya Rafael Sofia Tomas Una Vera Wes Yusuf Zoe"
).split()
STORE_ITEMS = (
    ("notebook", "notebooks"),
    ("pencil", "pencils"),
    ("apple", "apples"),
    ("ticket", "tickets"),
    ("sandwich", "sandwiches"),
    ("plant", "plants"),
    ("toy car", "toy cars"),
    ("candle", "candles"),
    ("mug", "mugs"),
    ("scarf", "scarves"),
    ("book", "books"),
    ("bag of rice", "bags of rice"),
)
FOODS = (
    ("cookie", "cookies"),
    ("muffin", "muffins"),
    ("cupcake", "cupcakes"),
    ("pancake", "pancakes"),
    ("dumpling", "dumplings"),
    ("bread roll", "bread rolls"),
)
ANIMALS = (
    ("chicken", "chickens", 2),
    ("cow", "cows", 4),
    ("duck", "ducks", 2),
    ("goat", "goats", 4),
    ("sheep", "sheep", 4),
    ("horse", "horses", 4),
)
VEHICLES = ("car", "bus", "train", "truck", "bike")
CROWDS = ("students", "guests", "players", "members", "workers", "campers")


def _shopping(r: random.Random, name: str) -> str:
    (one, many), (one2, many2) = r.sample(STORE_ITEMS, 2)
    a, b, pa, pb = r.randint(2, 9), r.randint(2, 9), r.randint(2, 15), r.randint(3, 25)
    paid = (a * pa + b * pb) // 10 * 10 + r.choice((10, 20, 50))
    return (
        f"{name} buys {a} {many} for ${pa} each and {b} {many2} for ${pb} each. "
        f"{name} pays with ${paid}. How much change does {name} get?"
    )


def _weekly_saving(r: random.Random, name: str) -> str:
    start, weekly, weeks = r.randint(0, 20) * 5, r.randint(3, 30), r.randint(4, 20)
    spend = r.randint(1, (start + weekly * weeks) // 10 + 1) * 5
    return (
        f"{name} has ${start} saved and adds ${weekly} every week. After {weeks} weeks, "
        f"{name} spends ${spend} on a gift. How much money does {name} have left?"
    )


def _speed(r: random.Random, name: str) -> str:
    speed, hours, back = r.randint(4, 16) * 5, r.randint(2, 6), r.randint(2, 8) * 5
    vehicle = r.choice(VEHICLES)
    return (
        f"{name} drives a {vehicle} at {speed} miles per hour for {hours} hours, then drives back "
        f"{back} miles. How many miles did {name} travel in total?"
    )


def _baking(r: random.Random, name: str) -> str:
    one, many = r.choice(FOODS)
    batches, per, eaten, friends = r.randint(2, 8), r.choice((6, 8, 10, 12, 24)), r.randint(1, 9), r.randint(2, 6)
    total = batches * per - eaten
    extra = total % friends
    return (
        f"{name} bakes {batches} batches of {many} with {per} {many} in each batch. {name} eats {eaten} "
        f"of them{' and gives ' + str(extra) + ' to a neighbor' if extra else ''}, then shares the rest "
        f"equally among {friends} friends. How many {many} does each friend get?"
    )


def _discount(r: random.Random, name: str) -> str:
    one, many = r.choice(STORE_ITEMS)
    price, pct, count = r.randint(2, 40) * 5, r.choice((10, 20, 25, 40, 50)), r.randint(2, 6)
    return (
        f"A {one} costs ${price}. The store has a {pct}% discount on every {one}. "
        f"{name} buys {count} {many}. How much does {name} pay?"
    )


def _wages(r: random.Random, name: str) -> str:
    rate, hours, over = r.randint(10, 30), r.randint(30, 40), r.randint(2, 12)
    return (
        f"{name} earns ${rate} an hour for the first {hours} hours of a week and 1.5 times that for every "
        f"hour after. Last week {name} worked {hours + over} hours. How much did {name} earn?"
    )


def _reading(r: random.Random, name: str) -> str:
    pages, first, daily = r.randint(12, 60) * 10, r.randint(2, 5), r.randint(10, 40)
    return (
        f"A book has {pages} pages. {name} read {first * daily} pages in the first {first} days and then "
        f"reads {daily + 5} pages a day. How many more days does {name} need to finish the book?"
    )


def _fraction_group(r: random.Random, name: str) -> str:
    crowd = r.choice(CROWDS)
    den = r.choice((3, 4, 5, 6, 8))
    total, num = den * r.randint(4, 30), r.randint(1, den - 1)
    stay = r.randint(1, 9)
    return (
        f"There are {total} {crowd} at {name}'s event. {num}/{den} of them leave early and {stay} more "
        f"leave at noon. How many {crowd} are still there?"
    )


def _ages(r: random.Random, name: str) -> str:
    other = r.choice([n for n in NAMES if n != name])
    age, times, years = r.randint(4, 15), r.randint(2, 4), r.randint(2, 12)
    return (
        f"{name} is {age} years old. {other} is {times} times as old as {name}. "
        f"How old will {other} be in {years} years?"
    )


def _ratio(r: random.Random, name: str) -> str:
    other = r.choice([n for n in NAMES if n != name])
    a, b = r.sample(range(1, 10), 2)
    total = (a + b) * r.randint(3, 25)
    return (
        f"{name} and {other} share {total} marbles in the ratio {a}:{b}. "
        f"How many more marbles does the one with more get?"
    )


def _farm(r: random.Random, name: str) -> str:
    (one1, many1, legs1), (_, many2, legs2) = r.sample(ANIMALS, 2)
    n1, n2 = r.randint(3, 30), r.randint(3, 30)
    return (
        f"{name}'s farm has {n1} {many1} and {n2} {many2}. A {one1} has {legs1} legs and each of the {many2} has "
        f"{legs2} legs. How many legs are there on the farm?"
    )


def _garden(r: random.Random, name: str) -> str:
    length, width, cost = r.randint(4, 30), r.randint(3, 20), r.randint(2, 9)
    return (
        f"{name}'s garden is a rectangle {length} meters long and {width} meters wide. Fencing costs ${cost} "
        f"per meter. How much does it cost to fence the whole garden?"
    )


def _fuel(r: random.Random, name: str) -> str:
    mpg, miles, price = r.randint(20, 40), r.randint(3, 20) * 60, r.randint(3, 5)
    miles -= miles % mpg
    return (
        f"{name}'s car goes {mpg} miles on one gallon of gas. Gas costs ${price} a gallon. "
        f"How much does {name} spend on gas for a {miles}-mile trip?"
    )


def _tips(r: random.Random, name: str) -> str:
    meals, price, tip = r.randint(2, 6), r.randint(8, 30), r.choice((10, 15, 20))
    return (
        f"{name} and friends order {meals} meals that cost ${price} each, and leave a {tip}% tip on the "
        f"total. How much do they spend altogether?"
    )


def _production(r: random.Random, name: str) -> str:
    per_hour, hours, days, broken = r.randint(5, 40), r.randint(4, 10), r.randint(2, 6), r.randint(1, 20)
    return (
        f"{name} makes {per_hour} bracelets an hour and works {hours} hours a day for {days} days. "
        f"{broken} bracelets break. {name} sells the rest for $3 each. How much money does {name} make?"
    )


def _minutes(r: random.Random, name: str) -> str:
    sessions, minutes, weeks = r.randint(2, 6), r.choice((15, 20, 30, 45, 50)), r.randint(2, 8)
    return (
        f"{name} practices the piano {sessions} times a week for {minutes} minutes each time. "
        f"How many hours does {name} practice in {weeks} weeks?"
    )


TEMPLATES: tuple[Callable[[random.Random, str], str], ...] = (
    _shopping,
    _weekly_saving,
    _speed,
    _baking,
    _discount,
    _wages,
    _reading,
    _fraction_group,
    _ages,
    _ratio,
    _farm,
    _garden,
    _fuel,
    _tips,
    _production,
    _minutes,
)


def word_problems(count: int = PROBLEMS, seed: int = SEED) -> Iterator[str]:
    """`count` problems, templates taken in turn, names and numbers drawn from one seeded
    generator, each asked as GSM8K asks (repeats are dropped by the corpus)."""
    r = random.Random(seed)
    for i in range(count):
        problem = TEMPLATES[i % len(TEMPLATES)](r, r.choice(NAMES))
        yield f"{GSM8K_INSTRUCTION}\n\n{problem}"

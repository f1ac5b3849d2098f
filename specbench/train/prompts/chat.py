"""Open-ended assistant requests for the drafters' training text, made here from templates and
seeded choices, in the kinds of request MT-Bench asks about (writing, role-play, reasoning,
extraction, science and humanities), so the target's answers teach a drafter how the target
writes essays, letters, explanations and structured answers. ShareGPT's human turns are
mostly other things (code, questions about a product, pasted text); these fill that gap. A made
request is no evaluation prompt, and the corpus drops any that shares a 13-word span with one
anyway.

The order is fixed by the seed, so every machine makes the same prompts and a pack finds
them again by key."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from specbench.train.prompts.math import NAMES as WORD_PROBLEM_NAMES

REQUESTS = 20_000
SEED = 0

NAMES = WORD_PROBLEM_NAMES[:26]  # the word problems' first 26 names: the committed packs' prompts were drawn from these
TOPICS = (
    "remote work",
    "urban gardening",
    "electric cars",
    "learning a second language",
    "public libraries",
    "volunteering",
    "social media and teenagers",
    "four-day work weeks",
    "recycling plastics",
    "space tourism",
    "online privacy",
    "local farmers' markets",
    "video games in education",
    "renewable energy",
    "fast fashion",
    "public transport",
    "homeschooling",
    "artificial intelligence in medicine",
    "minimalism",
    "team sports",
    "saving money in your twenties",
    "reading before bed",
    "cooking at home",
    "tiny houses",
    "museums",
    "climate change",
    "open-source software",
    "school uniforms",
    "night shifts",
    "adopting shelter pets",
)
FORMS = (
    "blog post",
    "short story",
    "poem",
    "persuasive essay",
    "speech",
    "newsletter article",
    "product description",
    "opinion column",
    "limerick",
    "diary entry",
    "set of tips",
    "children's story",
)
AUDIENCES = (
    "high school students",
    "busy parents",
    "retirees",
    "a company's new employees",
    "small business owners",
    "first-year university students",
    "a city council",
    "people who have never heard of it",
    "a local newspaper",
)
PLACES = (
    "Lisbon",
    "Kyoto",
    "the Scottish Highlands",
    "Cape Town",
    "Patagonia",
    "Iceland",
    "Marrakesh",
    "Vancouver",
    "the Amalfi Coast",
    "Hanoi",
    "Istanbul",
    "New Zealand's South Island",
    "Cusco",
    "Prague",
    "Zanzibar",
)
CHARACTERS = (
    "a pirate captain",
    "a medieval knight",
    "a detective in 1920s London",
    "a friendly robot",
    "a wise old wizard",
    "a ship's cook",
    "a lighthouse keeper",
    "an astronaut on Mars",
    "a famous chef",
    "a tour guide in Rome",
    "a kindergarten teacher",
    "a sports coach",
    "a museum curator",
    "a park ranger",
    "a time traveller from 2300",
)
PROFESSIONS = (
    "financial advisor",
    "doctor",
    "career counselor",
    "personal trainer",
    "lawyer",
    "travel agent",
    "interior designer",
    "nutritionist",
    "software architect",
    "marriage counselor",
    "real estate agent",
    "startup mentor",
    "history teacher",
    "gardening expert",
    "veterinarian",
)
CLIENT_PROBLEMS = (
    "I keep putting off important tasks until the last minute.",
    "I want to switch careers but I am afraid.",
    "My neighbour plays loud music every night.",
    "I have a job interview tomorrow and feel nervous.",
    "I cannot decide whether to rent or buy a home.",
    "My team at work does not communicate well.",
    "I want to eat healthier but I have little time to cook.",
    "My dog barks whenever I leave the house.",
    "I have to give a presentation to two hundred people.",
    "I am saving for a trip but keep overspending.",
)
CONCEPTS = (
    "photosynthesis",
    "inflation",
    "black holes",
    "the greenhouse effect",
    "vaccines",
    "supply and demand",
    "plate tectonics",
    "machine learning",
    "compound interest",
    "natural selection",
    "quantum entanglement",
    "the water cycle",
    "blockchain",
    "antibiotic resistance",
    "opportunity cost",
    "entropy",
    "DNA replication",
    "the immune system",
    "ocean tides",
    "nuclear fission",
    "the placebo effect",
    "gravity",
    "electric circuits",
    "public key cryptography",
    "the scientific method",
    "cloud computing",
    "sound waves",
    "the Doppler effect",
)
PAIRS = (
    ("weather", "climate"),
    ("a virus", "a bacterium"),
    ("speed", "velocity"),
    ("stocks", "bonds"),
    ("RAM", "storage"),
    ("mitosis", "meiosis"),
    ("a democracy", "a republic"),
    ("renting", "leasing"),
    ("nuclear fission", "nuclear fusion"),
    ("an acid", "a base"),
    ("a comet", "an asteroid"),
    ("monetary policy", "fiscal policy"),
    ("TCP", "UDP"),
    ("empathy", "sympathy"),
    ("a simile", "a metaphor"),
)
EVENTS = (
    "the Industrial Revolution",
    "the invention of the printing press",
    "the fall of the Roman Empire",
    "the Renaissance",
    "the French Revolution",
    "the Silk Road",
    "the moon landing",
    "the spread of the internet",
    "the Great Depression",
    "the end of the Cold War",
    "the invention of the steam engine",
    "the Meiji Restoration",
)
THEMES = (
    "happiness",
    "justice",
    "freedom",
    "friendship",
    "the good life",
    "honesty",
    "power",
    "education",
    "beauty",
    "duty",
    "progress",
    "tradition",
)
THINKERS = (
    "Aristotle",
    "Confucius",
    "Plato",
    "Immanuel Kant",
    "John Stuart Mill",
    "Simone de Beauvoir",
    "Epicurus",
    "Thomas Hobbes",
    "Jean-Jacques Rousseau",
    "Hannah Arendt",
    "David Hume",
    "Laozi",
)
FIELDS = ("education", "healthcare", "journalism", "agriculture", "banking", "music", "retail", "politics", "sports")
TECHNOLOGIES = (
    "smartphones",
    "the printing press",
    "electricity",
    "television",
    "social media",
    "the automobile",
    "satellites",
    "video calls",
    "online shopping",
    "machine translation",
)
CITIES = ("Oslo", "Lima", "Nairobi", "Seoul", "Toronto", "Madrid", "Perth", "Dublin", "Austin", "Porto")
COMPANIES = ("Northwind", "Bluefield", "Crestline", "Solara", "Pinebrook", "Vantage", "Redhill", "Orbitix")
PRODUCTS = (
    "wireless headphones",
    "a coffee grinder",
    "a standing desk",
    "a robot vacuum",
    "a tent",
    "a smartwatch",
    "an e-reader",
    "a blender",
    "a rain jacket",
    "a gaming chair",
)
TONES = ("formal", "friendly", "concise", "enthusiastic", "humorous", "polite but firm")
SUBJECTS = ("the stock market", "the weather", "exam results", "a football match", "a new law", "a film release")


def _article(r: random.Random) -> str:
    return f"Write a {r.choice(FORMS)} about {r.choice(TOPICS)} for {r.choice(AUDIENCES)}."


def _travel(r: random.Random) -> str:
    days = r.randint(2, 10)
    return r.choice(
        (
            f"Write an engaging travel blog post about a {days}-day trip to {r.choice(PLACES)}, covering food, "
            "sights and local customs.",
            f"Plan a {days}-day itinerary for a first visit to {r.choice(PLACES)} on a modest budget.",
        )
    )


def _email(r: random.Random) -> str:
    request = r.choice(
        (
            "to move a meeting to next week",
            "for feedback on a report I wrote",
            "for a refund on a broken order",
            "to join a charity run as a volunteer",
            "for a reference letter",
            "to approve a small budget for a team lunch",
            "for an extension on a project deadline",
            "to share the results of our customer survey",
        )
    )
    recipient = r.choice(("my manager", "a professor", "a customer", "a supplier", "my landlord", "a former colleague"))
    return f"Draft a {r.choice(TONES)} email to {recipient} asking {request}. Keep it under 150 words."


def _rewrite(r: random.Random) -> str:
    sentence = (
        f"{r.choice(NAMES)} said that the meeting about {r.choice(TOPICS)} was long, and nobody really decided "
        "anything at all."
    )
    style = r.choice(
        ("more formal", "shorter", "more vivid", "suitable for a child", "more persuasive", "in the passive voice")
    )
    return f'Rewrite this sentence to make it {style}: "{sentence}"'


def _story_opening(r: random.Random) -> str:
    return (
        f"Write a short story that begins with {r.choice(NAMES)}, {r.choice(CHARACTERS)}, finding a mysterious "
        f"letter in {r.choice(PLACES)}. Use no more than {r.choice((150, 200, 300))} words."
    )


def _roleplay(r: random.Random) -> str:
    character = r.choice(CHARACTERS)
    question = r.choice(
        (
            "What does a normal day look like for you?",
            "What advice would you give to someone just starting out?",
            f"What do you think about {r.choice(TOPICS)}?",
            "Tell me about the hardest moment of your career.",
            "How would you describe your home to a stranger?",
            "What do you miss most when you are away?",
        )
    )
    return f"Pretend to be {character} and stay in character for the whole answer. {question}"


def _advisor(r: random.Random) -> str:
    return (
        f'Act as an experienced {r.choice(PROFESSIONS)}. A client tells you: "{r.choice(CLIENT_PROBLEMS)}" What '
        "would you advise, step by step?"
    )


def _ordering_puzzle(r: random.Random) -> str:
    a, b, c, d = r.sample(NAMES, 4)
    trait = r.choice((("taller", "shortest"), ("older", "youngest"), ("faster", "slowest"), ("richer", "poorest")))
    return (
        f"{a} is {trait[0]} than {b}. {c} is {trait[0]} than {a}, and {d} is not {trait[0]} than {b}. "
        f"Who is the {trait[1]}? Explain your reasoning step by step."
    )


def _calendar(r: random.Random) -> str:
    days = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
    n = r.randint(3, 120)
    return f"If today is {r.choice(days)}, what day of the week will it be in {n} days? Show how you worked it out."


def _logic(r: random.Random) -> str:
    group, thing = r.choice(
        (("cats", "animals"), ("roses", "flowers"), ("engineers", "graduates"), ("squares", "rectangles"))
    )
    prop = r.choice(("are loved by someone", "are red", "can swim", "live in the city"))
    return (
        f"All {group} are {thing}. Some {thing} {prop}. Does it follow that some {group} {prop}? "
        f"Explain whether the argument is valid."
    )


def _counting(r: random.Random) -> str:
    n, m = r.randint(3, 9), r.randint(2, 5)
    return (
        f"A class of {n * m + r.randint(0, m - 1)} students is split into teams of {m}, and leftover students join "
        f"the last team. How many teams are there and how big is the last one? Explain."
    )


def _extract_people(r: random.Random) -> str:
    people = r.sample(NAMES, 3)
    cities = r.sample(CITIES, 3)
    years = sorted(r.sample(range(1990, 2025), 3))
    text = " ".join(
        f"{p} moved to {c} in {y} to work for {r.choice(COMPANIES)}." for p, c, y in zip(people, cities, years)
    )
    fmt = r.choice(("a JSON list of objects", "a table", "one line per person", "CSV rows"))
    return (
        f"Extract each person's name, city, year and employer from the text below and return them as {fmt}.\n\n{text}"
    )


def _extract_reviews(r: random.Random) -> str:
    product = r.choice(PRODUCTS)
    opinions = r.sample(
        (
            "It stopped working after a week.",
            "Best purchase I have made this year.",
            "It is fine, nothing special.",
            "The battery life is amazing but it feels cheap.",
            "Shipping was slow and the box was damaged.",
            "Exactly what I needed, and easy to set up.",
            "Too loud to use at night.",
            "Good value for the price.",
        ),
        3,
    )
    reviews = "\n".join(f"{i}. {o}" for i, o in enumerate(opinions, 1))
    return (
        f"Here are three reviews of {product}. Rate each one from 1 to 5 and return the ratings as a JSON "
        f"array.\n\n{reviews}"
    )


def _extract_report(r: random.Random) -> str:
    company = r.choice(COMPANIES)
    q = r.sample(range(10, 99), 4)
    text = (
        f"{company} reported revenue of ${q[0]} million in the first quarter and ${q[1]} million in the second. "
        f"Profit was ${q[2] // 4} million and ${q[3] // 4} million respectively, and the company opened a new "
        f"office in {r.choice(CITIES)}."
    )
    return (
        "From the following paragraph, identify the quarter with the higher revenue and the total profit, then "
        f"summarize it in one sentence.\n\n{text}"
    )


def _one_of(r: random.Random, *phrasings: tuple) -> str:
    """One of several phrasings, each (text with {} slots, then a list of choices per slot).
    Every phrasing's slots are drawn before the pick, so the seeded order of draws, and with it
    every prompt (and its key), does not depend on which phrasing is picked."""
    return r.choice([text.format(*(r.choice(choices) for choices in slots)) for text, *slots in phrasings])


def _explain(r: random.Random) -> str:
    return _one_of(
        r,
        ("Explain {} in simple terms, and give an everyday example.", CONCEPTS),
        ("How would you explain {} to a ten-year-old?", CONCEPTS),
        ("What are the most common misconceptions about {}?", CONCEPTS),
    )


def _difference(r: random.Random) -> str:
    a, b = r.choice(PAIRS)
    return f"What is the difference between {a} and {b}? Give an example of each."


def _science_question(r: random.Random) -> str:
    return _one_of(
        r,
        ("Describe how {} relates to {}, if at all.", CONCEPTS, CONCEPTS),
        ("Design a simple experiment a student could do at home to learn about {}.", CONCEPTS),
        ("What are the main benefits and risks of {} for {}?", TECHNOLOGIES, FIELDS),
    )


def _history(r: random.Random) -> str:
    event = r.choice(EVENTS)
    return r.choice(
        (
            f"Discuss the main causes and the long-term effects of {event}.",
            f"How did {event} change everyday life for ordinary people?",
            f"Write a short lesson plan that teaches {event} to middle school students.",
        )
    )


def _philosophy(r: random.Random) -> str:
    a, b = r.sample(THINKERS, 2)
    return f"Compare how {a} and {b} thought about {r.choice(THEMES)}. Where do they agree and where do they differ?"


def _society(r: random.Random) -> str:
    tech, field = r.choice(TECHNOLOGIES), r.choice(FIELDS)
    return r.choice(
        (
            f"How has the arrival of {tech} changed {field}? Give three examples.",
            f"Write a balanced argument for and against {r.choice(TOPICS)}.",
            f"Summarize how news coverage of {r.choice(SUBJECTS)} can shape public opinion.",
        )
    )


def _advice_list(r: random.Random) -> str:
    n = r.randint(3, 7)
    goal = r.choice(
        (
            "sleep better",
            "learn to cook",
            "start running",
            "make friends in a new city",
            "study for exams",
            "write a first novel",
            "reduce stress at work",
            "keep a small garden alive",
            "learn to code",
        )
    )
    return f"Give me {n} practical tips to {goal}, with a short explanation for each."


TEMPLATES: tuple[Callable[[random.Random], str], ...] = (
    _article,
    _travel,
    _email,
    _rewrite,
    _story_opening,
    _roleplay,
    _advisor,
    _ordering_puzzle,
    _calendar,
    _logic,
    _counting,
    _extract_people,
    _extract_reviews,
    _extract_report,
    _explain,
    _difference,
    _science_question,
    _history,
    _philosophy,
    _society,
    _advice_list,
)


def chat_requests(count: int = REQUESTS, seed: int = SEED) -> Iterator[str]:
    """`count` requests, templates taken in turn, choices drawn from one seeded generator
    (repeats are dropped by the corpus)."""
    r = random.Random(seed)
    for i in range(count):
        yield TEMPLATES[i % len(TEMPLATES)](r)

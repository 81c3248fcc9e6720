"""A deterministic English->German corpus generated from templates, for the demo and tests.

It is real translation work for a model, not a cipher:
- numbers: digits become German words with units before tens ("23" -> "dreiundzwanzig"),
- dates: "on March 5" / "on 5 March" become dative ordinals ("am fünften März"),
- agreement: article and adjective endings follow gender, number and case
  ("a red apple" -> "einen roten Apfel", "a red bottle" -> "eine rote Flasche"),
- word order: German puts the participle or infinitive last, and a fronted time phrase
  moves the verb before the subject ("Yesterday, Anna bought ..." -> "Gestern hat Anna ... gekauft.").

Usage: python -m mt_transformer.data.demo_data OUT_DIR  (writes {train,valid,test}.{en,de})
"""

from __future__ import annotations

import argparse
import os
import random

from mt_transformer.files import write_text

UNITS = ["", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun"]
TEENS = ["zehn", "elf", "zwölf", "dreizehn", "vierzehn", "fünfzehn", "sechzehn", "siebzehn", "achtzehn", "neunzehn"]
TENS = ["", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"]
ORDINAL_IRREGULAR = {1: "ersten", 3: "dritten", 7: "siebten", 8: "achten"}
MONTHS = [
    ("January", "Januar"),
    ("February", "Februar"),
    ("March", "März"),
    ("April", "April"),
    ("May", "Mai"),
    ("June", "Juni"),
    ("July", "Juli"),
    ("August", "August"),
    ("September", "September"),
    ("October", "Oktober"),
    ("November", "November"),
    ("December", "Dezember"),
]
# (english singular, english plural, gender, german singular, german plural)
NOUNS = [
    ("apple", "apples", "m", "Apfel", "Äpfel"),
    ("bottle", "bottles", "f", "Flasche", "Flaschen"),
    ("book", "books", "n", "Buch", "Bücher"),
    ("chair", "chairs", "m", "Stuhl", "Stühle"),
    ("lamp", "lamps", "f", "Lampe", "Lampen"),
    ("glass", "glasses", "n", "Glas", "Gläser"),
    ("table", "tables", "m", "Tisch", "Tische"),
    ("cup", "cups", "f", "Tasse", "Tassen"),
    ("bicycle", "bicycles", "n", "Fahrrad", "Fahrräder"),
    ("key", "keys", "m", "Schlüssel", "Schlüssel"),
    ("box", "boxes", "f", "Kiste", "Kisten"),
    ("house", "houses", "n", "Haus", "Häuser"),
    ("letter", "letters", "m", "Brief", "Briefe"),
    ("flower", "flowers", "f", "Blume", "Blumen"),
    ("egg", "eggs", "n", "Ei", "Eier"),
    ("dog", "dogs", "m", "Hund", "Hunde"),
    ("cat", "cats", "f", "Katze", "Katzen"),
    ("shirt", "shirts", "n", "Hemd", "Hemden"),
]
ADJECTIVES = [
    ("red", "rot"),
    ("blue", "blau"),
    ("green", "grün"),
    ("small", "klein"),
    ("big", "groß"),
    ("old", "alt"),
    ("new", "neu"),
    ("cheap", "billig"),
    ("beautiful", "schön"),
    ("heavy", "schwer"),
    ("white", "weiß"),
    ("black", "schwarz"),
]
# (english, german, person: 1 = first singular, 3 = third singular, 4 = first plural, 6 = third plural)
SUBJECTS = [
    ("I", "ich", 1),
    ("we", "wir", 4),
    ("my brother", "mein Bruder", 3),
    ("my sister", "meine Schwester", 3),
    ("the teacher", "der Lehrer", 3),
    ("the children", "die Kinder", 6),
    ("our neighbours", "unsere Nachbarn", 6),
    ("Anna", "Anna", 3),
    ("Tom", "Tom", 3),
    ("they", "sie", 6),
]
# (english past, english base, german participle, german infinitive)
VERBS = [
    ("bought", "buy", "gekauft", "kaufen"),
    ("sold", "sell", "verkauft", "verkaufen"),
    ("found", "find", "gefunden", "finden"),
    ("saw", "see", "gesehen", "sehen"),
    ("ordered", "order", "bestellt", "bestellen"),
    ("painted", "paint", "gemalt", "malen"),
    ("carried", "carry", "getragen", "tragen"),
    ("washed", "wash", "gewaschen", "waschen"),
]
HABEN = {1: "habe", 3: "hat", 4: "haben", 6: "haben"}
WERDEN = {1: "werde", 3: "wird", 4: "werden", 6: "werden"}
PAST_TIMES = [
    ("yesterday", "gestern"),
    ("last week", "letzte Woche"),
    ("this morning", "heute Morgen"),
    ("on Monday", "am Montag"),
    ("on Friday", "am Freitag"),
]
FUTURE_TIMES = [
    ("tomorrow", "morgen"),
    ("next week", "nächste Woche"),
    ("on Sunday", "am Sonntag"),
    ("on Tuesday", "am Dienstag"),
]


def number_word(n: int) -> str:
    """German cardinal for 1..99 ("eins", "dreiundzwanzig")."""
    if n < 10:
        return UNITS[n]
    if n < 20:
        return TEENS[n - 10]
    tens, units = divmod(n, 10)
    return TENS[tens] if units == 0 else ("ein" if units == 1 else UNITS[units]) + "und" + TENS[tens]


def ordinal_dative(n: int) -> str:
    """German ordinal after "am" for 1..31 ("ersten", "fünften", "einundzwanzigsten")."""
    if n in ORDINAL_IRREGULAR:
        return ORDINAL_IRREGULAR[n]
    return number_word(n) + ("ten" if n < 20 else "sten")


def noun_phrase(rng: random.Random, case: str) -> tuple[str, str, bool]:
    """A quantity (a / the / 2..99), an adjective and a noun, in the accusative or nominative.

    Returns the English and German phrases and whether they are plural.
    """
    en_sg, en_pl, gender, de_sg, de_pl = rng.choice(NOUNS)
    en_adj, de_adj = rng.choice(ADJECTIVES)
    kind = (
        rng.choice(["a", "the", "the_plural", "number", "number"])
        if case == "acc"
        else rng.choice(["the", "the_plural"])
    )
    if kind == "a":
        article = {"m": "einen", "f": "eine", "n": "ein"}[gender]
        ending = {"m": "en", "f": "e", "n": "es"}[gender]
        return f"{'an' if en_adj[0] in 'aeiou' else 'a'} {en_adj} {en_sg}", f"{article} {de_adj}{ending} {de_sg}", False
    if kind == "the":
        article = {"m": "den" if case == "acc" else "der", "f": "die", "n": "das"}[gender]
        ending = "en" if (gender == "m" and case == "acc") else "e"
        return f"the {en_adj} {en_sg}", f"{article} {de_adj}{ending} {de_sg}", False
    if kind == "the_plural":
        return f"the {en_adj} {en_pl}", f"die {de_adj}en {de_pl}", True
    count = rng.randint(2, 99)
    return f"{count} {en_adj} {en_pl}", f"{number_word(count)} {de_adj}e {de_pl}", True


def date_phrase(rng: random.Random) -> tuple[str, str]:
    day = rng.randint(1, 31)
    en_month, de_month = rng.choice(MONTHS)
    english = f"on {en_month} {day}" if rng.random() < 0.5 else f"on {day} {en_month}"
    return english, f"am {ordinal_dative(day)} {de_month}"


def capitalize(text: str) -> str:
    return text[0].upper() + text[1:]


def sentence_pair(rng: random.Random) -> tuple[str, str]:
    kind = rng.random()
    en_subj, de_subj, person = rng.choice(SUBJECTS)
    en_past, en_base, participle, infinitive = rng.choice(VERBS)
    en_obj, de_obj, _ = noun_phrase(rng, "acc")
    if kind < 0.45:  # perfect tense: the participle goes last
        en_time, de_time = date_phrase(rng) if rng.random() < 0.5 else rng.choice(PAST_TIMES)
        if rng.random() < 0.3 and not en_time.startswith("on"):  # fronted time phrase: verb second
            return (
                f"{capitalize(en_time)}, {en_subj} {en_past} {en_obj}.",
                f"{capitalize(de_time)} {HABEN[person]} {de_subj} {de_obj} {participle}.",
            )
        return (
            f"{capitalize(en_subj)} {en_past} {en_obj} {en_time}.",
            f"{capitalize(de_subj)} {HABEN[person]} {de_time} {de_obj} {participle}.",
        )
    if kind < 0.8:  # future: the infinitive goes last
        en_time, de_time = date_phrase(rng) if rng.random() < 0.5 else rng.choice(FUTURE_TIMES)
        return (
            f"{capitalize(en_subj)} will {en_base} {en_obj} {en_time}.",
            f"{capitalize(de_subj)} {WERDEN[person]} {de_time} {de_obj} {infinitive}.",
        )
    en_obj, de_obj, plural = noun_phrase(rng, "nom")  # a price: nominative, and the verb agrees in number
    price = rng.randint(2, 99)
    return (
        f"{capitalize(en_obj)} {'cost' if plural else 'costs'} {price} euros.",
        f"{capitalize(de_obj)} {'kosten' if plural else 'kostet'} {number_word(price)} Euro.",
    )


def generate(out_dir: str, train: int = 30000, valid: int = 500, test: int = 1000, seed: int = 1) -> None:
    """Write {train,valid,test}.{en,de}; valid and test hold no sentence that is in train."""
    rng = random.Random(seed)
    seen, splits = set(), {}
    for name, size in (("test", test), ("valid", valid), ("train", train)):
        pairs = []
        while len(pairs) < size:
            pair = sentence_pair(rng)
            if pair[0] in seen:  # test and valid never repeat; train never holds one of theirs
                continue
            if name != "train":
                seen.add(pair[0])
            pairs.append(pair)
        splits[name] = pairs
    for name, pairs in splits.items():
        write_text(os.path.join(out_dir, f"{name}.en"), "".join(en + "\n" for en, _ in pairs))
        write_text(os.path.join(out_dir, f"{name}.de"), "".join(de + "\n" for _, de in pairs))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Generate the demo English-German corpus.")
    parser.add_argument("out_dir")
    parser.add_argument("--train", type=int, default=30000)
    parser.add_argument("--valid", type=int, default=500)
    parser.add_argument("--test", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    generate(args.out_dir, args.train, args.valid, args.test, args.seed)


if __name__ == "__main__":
    main()

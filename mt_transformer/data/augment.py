"""Training text as people type it (data.augment): pairs changed on the fly, as OpusTrainer's
modifiers change the training data of Firefox Translations. Each modifier changes a pair with
its probability, in this order, on the text before subword encoding:

    remove_end_punct  the final punctuation of both sides left out, where both end with it
    typos             a share of the source's words misspelt: two letters swapped, one left
                      out, one added or one doubled (the target stays as it was)
    title_case        every word of both sides begins with a capital
    upper_case        both sides in capitals (after title_case, the capitals win); with
                      case_target false these two change the source alone
    inline_tags       an inline element (<b>, <i>, <em>, <strong>, <u>, <span>) around a span of
                      one to three source words and around the target words aligned to them, as
                      OpusTrainer's tags modifier: the model learns to carry markup it reads as
                      text (needs the pairs' word alignments: data/word_alignment.py)
    noise             the pair replaced by a line of random letters, digits and symbols on both
                      sides: the model learns to pass through what it cannot translate

A source tag at the start of a line (<2de>, <bt>) is kept as it is. The draws come from a seed
the caller gives (the run's seed, the epoch and the window of rows: data/epoch_draw.py), so a
resumed run and any number of loader workers change the same pairs the same way.
"""

from __future__ import annotations

import bisect
import random
import string

from mt_transformer.config import AugmentConfig

END_PUNCTUATION = ".!?;:…。！？"
TYPO_SHARE = 0.15  # of a line's words of two letters or more, at least one
NOISE_CHARACTERS = string.ascii_letters + string.digits + string.punctuation
INLINE_TAGS = ("b", "i", "em", "strong", "u", "span")
LONGEST_TAGGED = 3  # source words in an inline element


def upper_case(text: str) -> str:
    return text.upper()


def title_case(text: str) -> str:
    """Each word's first letter a capital, the rest as it was (str.title would write "Don'T")."""
    return " ".join(word[:1].upper() + word[1:] for word in text.split(" "))


def ends_with_punctuation(text: str) -> bool:
    stripped = text.rstrip()
    return bool(stripped) and stripped[-1] in END_PUNCTUATION


def remove_end_punct(text: str) -> str:
    return text.rstrip().rstrip(END_PUNCTUATION).rstrip()


def misspell(word: str, rng: random.Random) -> str:
    """`word` with one typo: two neighbouring letters swapped, one left out, one added or one doubled."""
    letters = [i for i, c in enumerate(word) if c.isalpha()]
    i = rng.choice(letters)
    kind = rng.randrange(4)
    if kind == 0 and i + 1 < len(word) and word[i + 1].isalpha() and word[i + 1] != word[i]:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if kind == 1:
        return word[:i] + word[i + 1 :]
    if kind == 2:
        added = rng.choice(string.ascii_lowercase)
        return word[:i] + (added.upper() if word[i].isupper() else added) + word[i:]
    return word[:i] + word[i] + word[i:]  # doubled (also where a swap had no neighbour to swap with)


def typos(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    candidates = [i for i, word in enumerate(words) if sum(c.isalpha() for c in word) >= 2]
    if not candidates:
        return text
    for i in rng.sample(candidates, max(1, round(TYPO_SHARE * len(candidates)))):
        words[i] = misspell(words[i], rng)
    return " ".join(words)


def wrapped(words: list[str], first: int, last: int, tag: str) -> str:
    """The words with <tag> before word `first` and </tag> after word `last`, no space added: the
    words stay as many, so the pair's word alignment still holds."""
    words = list(words)
    words[first] = f"<{tag}>" + words[first]
    words[last] = words[last] + f"</{tag}>"  # the same word where first is last
    return " ".join(words)


def inline_tags(src: str, tgt: str, alignment: list[int], rng: random.Random) -> tuple[str, str] | None:
    """Both sides with one inline element: around a span of up to LONGEST_TAGGED source words and
    around the target words `alignment` (flat word pairs) aligns to them, where no word inside the
    target span aligns outside the source span; None where three draws find no such span."""
    src_words, tgt_words = src.split(" "), tgt.split(" ")
    links = [(s, t) for s, t in zip(alignment[::2], alignment[1::2]) if s < len(src_words) and t < len(tgt_words)]
    for _ in range(3 if links else 0):
        first = rng.choice(links)[0]
        last = min(first + rng.randrange(LONGEST_TAGGED), len(src_words) - 1)
        aligned = [t for s, t in links if first <= s <= last]
        start, end = min(aligned), max(aligned)
        if all(first <= s <= last for s, t in links if start <= t <= end):
            tag = rng.choice(INLINE_TAGS)
            return wrapped(src_words, first, last, tag), wrapped(tgt_words, start, end, tag)
    return None


def noise(rng: random.Random) -> str:
    """A line of 1-6 words of random letters, digits and symbols."""
    return " ".join(
        "".join(rng.choice(NOISE_CHARACTERS) for _ in range(rng.randint(1, 8))) for _ in range(rng.randint(1, 6))
    )


def _split_tag(text: str, tags: frozenset[str]) -> tuple[str, str]:
    head, _, rest = text.partition(" ")
    return (head + " ", rest) if head in tags else ("", text)


def augment_pair(
    src: str, tgt: str, setting: AugmentConfig, rng: random.Random, tags: frozenset[str] = frozenset()
) -> tuple[str, str]:
    """The pair as the modifiers of `setting` change it, each drawn with its probability from `rng`."""
    return _modified(src, tgt, setting, rng, tags)[:2]


def _end_punct(src: str, tgt: str, setting: AugmentConfig, rng: random.Random, alignment) -> tuple[str, str]:
    if ends_with_punctuation(src) and ends_with_punctuation(tgt):
        return remove_end_punct(src), remove_end_punct(tgt)
    return src, tgt


def _typos(src: str, tgt: str, setting: AugmentConfig, rng: random.Random, alignment) -> tuple[str, str]:
    return typos(src, rng), tgt


def _title(src: str, tgt: str, setting: AugmentConfig, rng: random.Random, alignment) -> tuple[str, str]:
    return title_case(src), title_case(tgt) if setting.case_target else tgt


def _upper(src: str, tgt: str, setting: AugmentConfig, rng: random.Random, alignment) -> tuple[str, str]:
    return upper_case(src), upper_case(tgt) if setting.case_target else tgt


def _tags(src: str, tgt: str, setting: AugmentConfig, rng: random.Random, alignment) -> tuple[str, str]:
    return inline_tags(src, tgt, alignment, rng) or (src, tgt)


def _noise(src: str, tgt: str, setting: AugmentConfig, rng: random.Random, alignment) -> tuple[str, str]:
    text = noise(rng)
    return text, text


# each data.augment share's change of a pair, by its field of AugmentConfig (which holds their order)
STEPS = {
    "remove_end_punct": _end_punct,
    "typos": _typos,
    "title_case": _title,
    "upper_case": _upper,
    "inline_tags": _tags,
    "noise": _noise,
}


def _modified(src: str, tgt: str, setting: AugmentConfig, rng: random.Random, tags: frozenset[str], alignment=()):
    """augment_pair's pair, and whether noise replaced it (its words are no longer the pair's);
    `alignment`: the pair's flat word pairs, for inline_tags (none: no tags)."""
    tag, src, noised = *_split_tag(src, tags), False
    for name, probability in setting.shares.items():
        if probability and rng.random() < probability:
            src, tgt = STEPS[name](src, tgt, setting, rng, alignment)
            noised = noised or STEPS[name] is _noise
    return tag + src, tgt, noised


class PairAugmenter:
    """A picklable function of training rows (a window of data/epoch_draw.py): each pair changed
    as its corpus's data.augment says (pairs laid end to end, `corpus_sizes` each), then the
    changed pairs encoded by `encoder` (a prepare.SubwordEncoder); under data.spm_alpha every pair
    is, each with a drawn segmentation. Returns the rows' src_ids and tgt_ids, and their word
    `alignment` where the rows have one (none for a pair that noise replaced)."""

    def __init__(self, encoder, settings: list[AugmentConfig], corpus_sizes: list[int], tags=()):
        self.encoder, self.settings, self.tags = encoder, list(settings), frozenset(tags)
        self.ends = [sum(corpus_sizes[: k + 1]) for k in range(len(corpus_sizes))]

    def without_sampling(self) -> PairAugmenter | None:
        """The same changes, each changed pair encoded without a sampled segmentation
        (train.sampling_min_epochs); None where nothing is left to change."""
        if not any(s.active for s in self.settings):
            return None
        plain = PairAugmenter(type(self.encoder)(self.encoder.directory, 0.0, self.encoder.leads), self.settings, [])
        plain.ends, plain.tags = self.ends, self.tags
        return plain

    def change(self, src: list[str], tgt: list[str], indices, rng: random.Random, alignments=None):
        """Change the pairs (their row `indices`; their word `alignments`, if any) in place;
        returns the positions of those changed and of those noise replaced."""
        changed, noised = [], []
        for k, index in enumerate(indices):
            setting = self.settings[min(bisect.bisect_right(self.ends, int(index)), len(self.settings) - 1)]
            if setting.active:
                alignment = alignments[k] if alignments is not None else ()
                *new, replaced = _modified(src[k], tgt[k], setting, rng, self.tags, alignment)
                if tuple(new) != (src[k], tgt[k]):
                    src[k], tgt[k] = new
                    changed.append(k)
                if replaced:
                    noised.append(k)
        return changed, noised

    def examples(self, dataset, count: int, seed: int) -> list[tuple[str, str, str, str]]:
        """Up to `count` pairs of `dataset` (columns src, tgt) as a batch of its first rows would
        change them: (source, target, changed source, changed target)."""
        found: list[tuple[str, str, str, str]] = []
        rng = random.Random(seed)
        for start in range(0, len(dataset), 1000):
            rows = dataset[start : start + 1000]
            src, tgt = list(rows["src"]), list(rows["tgt"])
            alignments = rows["alignment"] if "alignment" in rows else None
            for k in self.change(src, tgt, range(start, start + len(src)), rng, alignments)[0]:
                found.append((rows["src"][k], rows["tgt"][k], src[k], tgt[k]))
                if len(found) == count:
                    return found
        return found

    def __call__(self, rows: dict, seed: int, indices) -> dict:
        src, tgt = list(rows["src"]), list(rows["tgt"])
        alignments = rows["alignment"] if "alignment" in rows else None
        changed, noised = self.change(src, tgt, indices, random.Random(seed), alignments)
        aligned = {}
        if "alignment" in rows:
            noised = set(noised)
            aligned = {"alignment": [[] if k in noised else a for k, a in enumerate(rows["alignment"])]}
        if self.encoder.alpha > 0:
            return {**self.encoder({"src": src, "tgt": tgt}, seed=seed), **aligned}
        src_ids, tgt_ids = list(rows["src_ids"]), list(rows["tgt_ids"])
        if changed:
            encoded = self.encoder({"src": [src[k] for k in changed], "tgt": [tgt[k] for k in changed]})
            for k, s, t in zip(changed, encoded["src_ids"], encoded["tgt_ids"]):
                src_ids[k], tgt_ids[k] = s, t
        return {"src_ids": src_ids, "tgt_ids": tgt_ids, **aligned}


class TokenizerSample:
    """The tokenizer's training lines, each followed, for a seeded share of them, by its upper-case
    and its title-case form and by the line with one word in an inline element (the shares
    data.augment gives upper_case, title_case and inline_tags): so that sentencepiece learns pieces
    for capitals and tags, and upper-case input does not fall apart into single letters. A
    sequence like the lines it wraps: every pass yields the same lines."""

    def __init__(self, lines, upper: float, title: float, seed: int, tags=(), inline: float = 0.0):
        self.lines, self.upper, self.title, self.seed, self.tags = lines, upper, title, seed, frozenset(tags)
        self.inline = inline

    def __iter__(self):
        rng = random.Random(self.seed)
        for line in self.lines:
            yield line
            tag, text = _split_tag(line, self.tags)
            if rng.random() < self.upper:
                yield tag + upper_case(text)
            if rng.random() < self.title:
                yield tag + title_case(text)
            if self.inline and text and rng.random() < self.inline:
                words = text.split(" ")
                word = rng.randrange(len(words))
                yield tag + wrapped(words, word, word, rng.choice(INLINE_TAGS))

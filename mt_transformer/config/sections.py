"""The run configuration's typed sections: data (with its corpora), model, train
(config/training.py) and decode.

Every key has its one default here. config/loading.py reads them from YAML and config/checks.py
validates them; everything deeper receives a frozen `Config`, a section of it, or plain values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from mt_transformer.config.cleaning import CleanConfig
from mt_transformer.config.training import TrainConfig


def language_tag(language: str) -> str:
    """The source token that asks a model trained with data.target_tags for `language`: <2xx>."""
    return f"<2{language}>"


def tag_language(token: str) -> str | None:
    """The language a target tag <2xx> asks for; None for any other token."""
    return token[2:-1] if len(token) > 3 and token.startswith("<2") and token.endswith(">") else None


@dataclass(frozen=True)
class AugmentConfig:
    """data.augment: per modifier, the share of training pairs it changes, drawn anew each epoch
    (data/augment.py says what each does), in the order they apply; all 0, the default: the
    pairs as they are."""

    remove_end_punct: float = 0.0
    typos: float = 0.0
    title_case: float = 0.0
    upper_case: float = 0.0
    inline_tags: float = 0.0  # after the capitals (no <B>); needs word alignments: the data stage makes them
    noise: float = 0.0
    # upper_case and title_case change the target too (OpusTrainer's way); false: the source alone,
    # so the model learns to read capitals and writes its usual case (docs/techniques.md)
    case_target: bool = True

    @property
    def shares(self) -> dict[str, float]:
        """Each modifier's share, in the order they apply: the fields of type float."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.type == "float"}

    @property
    def active(self) -> bool:
        return any(self.shares.values())


@dataclass(frozen=True)
class CorpusConfig:
    """One corpus: its language pair and where its splits are. The data section is one itself;
    with `data.corpora` a run learns from several, each described by these keys."""

    src_lang: str = "src"
    tgt_lang: str = "tgt"
    # Where the pairs come from. text: `train` is a prefix, read as `{train}.{src_lang}` and
    # `{train}.{tgt_lang}`; tsv/jsonl: `train` is a file; hub: `train` is a split name of
    # the `datasets` dataset `hub_name` (config `hub_config`).
    format: Literal["text", "tsv", "jsonl", "hub"] = "text"
    train: str | None = None
    valid: str | None = None
    test: str | None = None
    hub_name: str | None = None
    hub_config: str | None = None
    # Column names for jsonl/hub rows that are not {"translation": {src_lang: .., tgt_lang: ..}}.
    src_column: str | None = None
    tgt_column: str | None = None
    # a token before every source sentence of this corpus, such as <bt> for back-translated pairs
    tag: str | None = None
    # distillation: the training targets become these models' translations of the training
    # sources (a checkpoint, run, average, mt-import or mt-export directory; several: an
    # ensemble), made once into the run's cache (training/teacher.py)
    teacher: tuple[str, ...] = ()
    # training pairs changed on the fly as people type (capitals, typos, no final full stop):
    # modifier -> share of pairs; in a corpus of data.corpora, None takes the data section's
    augment: AugmentConfig | None = None
    # the rules its training pairs pass before anything learns from them (config/cleaning.py);
    # in a corpus of data.corpora, None takes the data section's: a crawl and a curated corpus differ
    clean: CleanConfig | None = None

    def files(self, split: str) -> list[str]:
        """The local files behind one split (none for hub data or an unset split): text reads
        `{prefix}.{src_lang}` and `{prefix}.{tgt_lang}`, tsv and jsonl one file."""
        location = getattr(self, split)
        if location is None or self.format == "hub":
            return []
        if self.format == "text":
            return [f"{location}.{self.src_lang}", f"{location}.{self.tgt_lang}"]
        return [location]

    def trained_from(self, prefix: str) -> CorpusConfig:
        """This corpus with its training pairs read from the text files PREFIX.SRC and PREFIX.TGT
        (what a stage made of them: cleaned pairs, a teacher's translations); its other splits go."""
        keys = dict(format="text", train=prefix, valid=None, test=None, hub_name=None, hub_config=None)
        return dataclasses.replace(self, **keys, src_column=None, tgt_column=None)

    def source_tags(self, target_tags: bool) -> list[str]:
        """The tokens before each of this corpus's source sentences: <2xx> (xx its target language)
        when the run has target tags, then its own tag."""
        return ([language_tag(self.tgt_lang)] if target_tags else []) + ([self.tag] if self.tag else [])


@dataclass(frozen=True)
class DataConfig(CorpusConfig):
    # Several corpora in one run, instead of the splits above: each a mapping of CorpusConfig's keys.
    corpora: tuple[CorpusConfig, ...] = ()
    # a token <2xx> before each source sentence, xx its target language: one model for several
    # target languages, told which one by `mt-translate --tgt-lang xx`
    target_tags: bool = False
    # language tokens, as NLLB and M2M100 have them (mt-import writes this): each source begins
    # with its language's token and each target with its own, forced first when translating
    language_tokens: bool = False
    # with several corpora each epoch draws from corpus i in proportion to (its share of the
    # pairs) ** (1 / T): 1 keeps the sizes' proportions, higher values favour small corpora
    sampling_temperature: float = 1.0
    # each teacher line the best of this many hypotheses of its beam, chosen by `teacher_select`:
    # score, the teacher's own best; chrf, the one closest to the reference by sentence chrF
    teacher_nbest: int = 1
    teacher_select: Literal["score", "chrf"] = "score"
    # drop distilled pairs whose teacher log-probability per token (EOS included) is below this
    teacher_min_log_prob: float | None = None
    # sentencepiece; vocab_size 0: sized from the training text (data/from_text.py)
    vocab_size: int = 8000
    joint_vocab: bool = True
    spm_type: Literal["unigram", "bpe"] = "unigram"
    character_coverage: float = 0.0  # 0: 0.9995 for Chinese/Japanese/Korean text, else 1.0 (data/from_text.py)
    # characters outside the vocabulary become their UTF-8 bytes (256 byte pieces of the
    # vocabulary) instead of <unk>, for a model to copy; off: it costs BLEU where training has
    # no rare characters (docs/techniques.md, "Characters the training data never had")
    byte_fallback: bool = False
    spm_max_sentences: int = 2_000_000
    # sources read case-folded by their sentencepiece model (nmt_nfkc_cf), in training and in every
    # export: capitals and Title Case read as the usual text (docs/techniques.md#input-as-people-type-it)
    fold_source_case: bool = False
    # cleaning (training data only), in subword tokens
    max_len: int = 256
    max_ratio: float = 3.0
    # subword regularization of the training data (0: off): a segmentation drawn per epoch, with
    # smoothing alpha for unigram models or as the BPE-dropout probability; never at validation
    spm_alpha: float = 0.0
    num_proc: int = 1
    cache_dir: str | None = None  # default: {train.output_dir}/cache; else new, empty or holding cache entries only

    def corpus_list(self) -> tuple[CorpusConfig, ...]:
        """The corpora of the run: those of `corpora`, or this section itself."""
        return self.corpora or (self,)

    def clean_of(self, corpus: CorpusConfig) -> CleanConfig:
        """The rules `corpus`'s training pairs pass: its own, else the section's, else the defaults."""
        return corpus.clean or self.clean or CleanConfig()

    def augment_of(self, corpus: CorpusConfig) -> AugmentConfig:
        """What data.augment does to `corpus`'s training pairs: its own setting, else the section's."""
        return corpus.augment or self.augment or AugmentConfig()

    @property
    def tags(self) -> list[str]:
        """Every source tag of the run, sorted: the tokenizer keeps each as one piece."""
        return sorted({tag for c in self.corpus_list() for tag in c.source_tags(self.target_tags)})

    @property
    def target_languages(self) -> list[str]:
        return sorted({c.tgt_lang for c in self.corpus_list()})

    @property
    def target_language(self) -> str | None:
        """The run's one target language (BLEU tokenizes for it), or None when it has several."""
        languages = self.target_languages
        return languages[0] if len(languages) == 1 else None

    def tokenizer_settings(self) -> dict:
        """The settings that decide the tokenizer: a run's tokenizer is reused only while they hold."""
        names = ("src_lang", "tgt_lang", "vocab_size", "joint_vocab", "spm_type", "character_coverage")
        if self.language_tokens:  # one tokenizer for all of its languages: the pair is the run's choice
            names = tuple(name for name in names if name not in ("src_lang", "tgt_lang")) + ("language_tokens",)
        return {name: getattr(self, name) for name in names + ("byte_fallback", "fold_source_case", "tags")}

    def tokenizer_conflict(self, saved: dict) -> tuple[str, object, object] | None:
        """The first tokenizer setting in which this config differs from `saved` (the
        tokenizer_settings of an existing tokenizer), as (config key, this value, saved value);
        None when they agree. character_coverage and vocab_size 0 ("choose from the text") accept any value."""
        for name, value in self.tokenizer_settings().items():
            if name in ("character_coverage", "vocab_size") and value == 0:  # chosen from the text
                continue
            # absent: no byte pieces, no folding
            before = saved.get(name, False if name in ("byte_fallback", "fold_source_case") else None)
            if before != value:
                key = "data.target_tags/tag (source tags)" if name == "tags" else f"data.{name}"
                return key, value, before
        return None


@dataclass(frozen=True)
class ModelConfig:
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    word_dropout: float = 0.0  # the chance a source word's embedding is zeroed in training
    norm: Literal["post", "pre"] = "post"
    # fairseq: fairseq's sinusoid (M2M100 and NLLB's): other frequencies, sines first, from position 2
    positions: Literal["sinusoidal", "learned", "fairseq"] = "sinusoidal"
    activation: Literal["relu", "swish", "gelu"] = "relu"  # the FFN's: the paper's relu; swish (SiLU) as in OPUS-MT
    max_positions: int = 1024
    tie_embeddings: bool = True
    # the token the decoder reads first: bos, ours; eos, fairseq's (M2M100 and NLLB start from </s>)
    decoder_start: Literal["bos", "eos"] = "bos"
    # the encoder reads the token a source begins with (its language's) after the source's EOS,
    # as NLLB models tuned with transformers' legacy tokenizer layout do
    source_tag_after_eos: bool = False
    output_bias: bool = False  # a learned bias on the output logits (Marian's, as OPUS-MT models have)
    # attention and FFN weights: xavier, Xavier-uniform for all; fairseq, W^Q, W^K, W^V with gain
    # 1/sqrt(2) and the FFN at PyTorch's default, which learns faster per update
    # (docs/recipes.md, "The decay's shape, and the initialisation")
    init: Literal["xavier", "fairseq"] = "xavier"


@dataclass(frozen=True)
class DecodeConfig:
    beam_size: int = 4
    alpha: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50
    n_best: int = 1
    max_tokens: int = 8192
    max_input_len: int = 0  # longer inputs are translated in parts; 0: data.max_len
    no_repeat_ngram: int = 0  # no n-gram of this many tokens twice in an output (fairseq's); 0: off
    # sampling instead of search (decoding/sampling.py): n_best draws per input
    sampling: bool = False
    topk: int = 0  # draw among the k most probable tokens; 0: all
    topp: float = 1.0  # draw among the fewest most probable tokens that hold this probability (nucleus)
    temperature: float = 1.0  # below 1 sharpens the distribution, above 1 flattens it
    seed: int = 1  # the same seed, input and batch settings draw the same samples
    # the PyTorch engine's matrix products: under autocast in bf16 or fp16 where the device has units
    # for them; int8 (CPU): CTranslate2's int8 (calls that only ours runs compute in fp32);
    # auto: CTranslate2's float32 where it runs the call (--engine auto), else
    # bf16 on a CPU with bf16 units, else fp32 (devices.decode_precision). fp32 by default, so that
    # outputs do not depend on the host
    precision: Literal["auto", "fp32", "bf16", "fp16", "int8"] = "fp32"


@dataclass(frozen=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

"""Byte-level BPE tokenizer.json files of the families hydraulis reads, trained here by the
`tokenizers` package on a corpus (nothing is downloaded). Used by hf_tokenizer_parity_test.py
and bench/tokenizer_speed.py.

Each family imitates the published tokenizer's pipeline (its pre-tokenizer pattern,
normalizer, special tokens and template) at a small vocabulary:
  gpt2      ByteLevel with GPT-2's pattern, ByteLevel post-processor
  gpt2_legacy  the same with merges written as "a b" strings (older files)
  llama3    Split by LLaMA-3's pattern + ByteLevel, ignore_merges, BOS template
  qwen2     NFC, Split by Qwen2's pattern + ByteLevel, chat special tokens
  prefix    ByteLevel with add_prefix_space
  variants  NFKC; Split steps with every behaviour, a literal and an inverted one; added
            tokens matched before and after normalization
"""
import json
import os

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
FAMILIES = ("gpt2", "gpt2_legacy", "llama3", "qwen2", "prefix", "variants")


def _train(texts, pre_tokenizer, special, vocab_size, normalizer=None, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def make(family, texts, out_dir, vocab_size=3000):
    """Trains `family` on `texts`; writes OUT_DIR/FAMILY/tokenizer.json (and, where the
    family has one, tokenizer_config.json with its eos_token). Returns the tokenizer.json path."""
    d = os.path.join(out_dir, family)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    eos = None
    if family in ("gpt2", "gpt2_legacy"):
        tok = _train(texts, pre_tokenizers.ByteLevel(add_prefix_space=False), ["<|endoftext|>"],
                     vocab_size)
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        eos = "<|endoftext|>"
    elif family == "llama3":
        tok = _train(texts, pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), "isolated", False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
            ["<|begin_of_text|>", "<|end_of_text|>"], vocab_size, ignore_merges=True)
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A",
                pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                special_tokens=[("<|begin_of_text|>", bos)])])
        eos = "<|end_of_text|>"
    elif family == "qwen2":
        tok = _train(texts, pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), "isolated", False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
            ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], vocab_size,
            normalizer=normalizers.NFC())
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        eos = "<|im_end|>"
    elif family == "prefix":
        tok = _train(texts, pre_tokenizers.ByteLevel(add_prefix_space=True), [], vocab_size)
    elif family == "variants":
        tok = _train(texts, pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(r"\d"), "removed", False),
            pre_tokenizers.Split("-", "merged_with_previous", False),
            pre_tokenizers.Split(Regex(r"[.,;:]"), "merged_with_next", False),
            pre_tokenizers.Split(Regex(r"\s+"), "contiguous", True),
            pre_tokenizers.Split(Regex(r"[()\[\]{}]"), "isolated", False),
            pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)]),
            ["<s>"], vocab_size, normalizer=normalizers.Sequence([normalizers.NFKC()]))
        tok.add_tokens([AddedToken("\ufb01x", normalized=False),
                        AddedToken("fine", normalized=True),
                        AddedToken("hello world", normalized=True)])
    else:
        raise ValueError(f"unknown family {family!r}; one of {FAMILIES}")
    tok.save(path)
    if family == "gpt2_legacy":
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
    if eos is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"eos_token": {"content": eos, "special": True}}, f)
    return path

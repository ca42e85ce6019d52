#!/usr/bin/python3
"""kjv_es_bleu.py DATA_DIR [ANSWERS]: corpus BLEU-4 of translations of the
test verses of models/kjv-es's data (DATA_DIR as `models/kjv-es/prepare
DATA_DIR` writes it) against their references (test.es.txt), for the
word-for-word baseline and, given ANSWERS (`dlserve --generate --prompts
DATA_DIR/test.en.txt`'s JSON lines, a text_output each, in order), for
them; prints one JSON object. Plain Python, no numpy.

BLEU: Papineni et al.'s corpus BLEU-4: clipped n-gram matches (n = 1..4)
summed over the corpus, their geometric mean times the brevity penalty
exp(1 - r/c) when the hypotheses' c words are fewer than the references'
r; no smoothing. Words are lowercased and split at spaces (the `words`
tokenizer's words, as the references and the model's answers are).

The baseline translates word for word with a dictionary from the same
training pairs (train.jsonl: the English verse, lowercased into words by
the `words` tokenizer's rule; the Spanish one as its ids, through
vocab_es.txt, so a word outside it is "<unk>" there too): each English
word becomes the Spanish word it is aligned with by verse co-occurrence,
the one with the highest Dice coefficient 2 c(e, s) / (c(e) + c(s)) (c:
the number of training verses that hold the word, or both), among those
seen together at least twice (ties: more co-occurrences, then the
alphabetically first); an English word with no such partner is copied as
it is (names mostly read the same). Word order is the English one.
"""
import collections
import json
import math
import re
import sys

WORD = re.compile(rb"[A-Za-z0-9'\x80-\xff]+")


def words(text):
    """The `words` tokenizer's words of text, lowercased (ASCII letters)."""
    return [w.decode("utf-8", "surrogateescape") for w in WORD.findall(text.encode().lower())]


def ngrams(ws, n):
    return collections.Counter(tuple(ws[i:i + n]) for i in range(len(ws) - n + 1))


def bleu(hyps, refs):
    """Corpus BLEU-4 of hypotheses against one reference each (word lists)."""
    match, total = [0] * 4, [0] * 4
    c = r = 0
    for h, ref in zip(hyps, refs):
        c, r = c + len(h), r + len(ref)
        for n in range(1, 5):
            hn, rn = ngrams(h, n), ngrams(ref, n)
            match[n - 1] += sum(min(k, rn[g]) for g, k in hn.items())
            total[n - 1] += max(len(h) - n + 1, 0)
    if c == 0 or 0 in match:
        return 0.0, match, total, c, r
    logp = sum(math.log(m / t) for m, t in zip(match, total)) / 4
    bp = 1.0 if c >= r else math.exp(1 - r / c)
    return bp * math.exp(logp), match, total, c, r


def dictionary(data):
    """English word -> Spanish word by the highest Dice coefficient of
    verse co-occurrence over train.jsonl (see the module's text)."""
    with open(data + "/vocab_es.txt", encoding="utf-8") as f:
        vocab = ["", "<unk>"] + f.read().split("\n")[:-1]
    eos = vocab.index("eos")
    c_en, c_es, both = collections.Counter(), collections.Counter(), collections.Counter()
    with open(data + "/train.jsonl", encoding="utf-8") as f:
        for line in f:
            s = json.loads(line)
            en = set(words(s["src"]))
            es = {vocab[i] for i in s["ids"] if i != eos and i != 1}
            c_en.update(en)
            c_es.update(es)
            both.update((e, w) for e in en for w in es)
    best = {}
    for (e, w), k in both.items():
        if k < 2:
            continue
        key = (2 * k / (c_en[e] + c_es[w]), k, [-ord(ch) for ch in w])
        if e not in best or key > best[e][0]:
            best[e] = (key, w)
    return {e: w for e, (_, w) in best.items()}


def evaluate(data, answers=None):
    """The baseline's BLEU on DATA_DIR's test verses, and the answers' in
    file answers (JSON lines) if given."""
    with open(data + "/test.en.txt", encoding="utf-8") as f:
        sources = f.read().split("\n")[:-1]
    with open(data + "/test.es.txt", encoding="utf-8") as f:
        refs = [line.split() for line in f.read().split("\n")[:-1]]
    d = dictionary(data)
    base = [[d.get(w, w) for w in words(s)] for s in sources]
    score, _, _, c, r = bleu(base, refs)
    out = {"test": len(refs), "baseline": "word for word (Dice-aligned dictionary)",
           "baseline_bleu": round(100 * score, 2), "baseline_words": c, "reference_words": r}
    if answers:
        with open(answers, encoding="utf-8") as f:
            texts = [json.loads(line)["text_output"] for line in f]
        if len(texts) != len(refs):
            sys.exit("kjv_es_bleu.py: %d answers for %d test verses" % (len(texts), len(refs)))
        score, match, total, c, _ = bleu([t.lower().split() for t in texts], refs)
        out.update(bleu=round(100 * score, 2), words=c,
                   precisions=[round(m / t, 4) if t else 0 for m, t in zip(match, total)])
    return out


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: kjv_es_bleu.py DATA_DIR [ANSWERS]")
    print(json.dumps(evaluate(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else None)))


if __name__ == "__main__":
    main()

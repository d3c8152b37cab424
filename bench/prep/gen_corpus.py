#!/usr/bin/env python3
"""The corpus of bench/prep: deterministic, ticket-like support texts with planted duplicates.

    gen_corpus.py OUT_DIR [--size-mb 1024] [--seed 25] [--shards N]

Writes OUT_DIR/part-NNNNN.jsonl (rows {"id", "customer_id", "text"}, dealt round-robin over the
shards so planted copies land in other shards than their originals), OUT_DIR/truth.jsonl (one
line per planted pair: {"a", "b", "kind": "exact"|"near", "jaccard"}) and OUT_DIR/meta.json
(counts, bytes, seed, the fractions). The same seed and size give the same bytes.

What is in it (README.md says why):
- originals: a subject line, a greeting, 1-6 paragraphs of sentences and a closing; most
  words are drawn from a Zipf distribution over a ~24,000-word vocabulary (real support words
  and seeded pseudo-words), some sentences come from ~30 templates with slots filled by random
  words, order numbers, dates and amounts, so unrelated texts share almost no 5-word shingle;
  ~2.7 KB on average (log-normal lengths, 0.3-12 KB);
- exact duplicates (about 3% of originals get 1-2 copies): byte-identical, or (a third of
  them) with other letter case and whitespace only, i.e. equal after normalisation;
- near-duplicates (about 5% of originals get 1-4 variants, clusters of 2-5): each variant is
  the original with a fraction of its words substituted, inserted or deleted (60% of variants
  0.2-2.2% of words, 40% 2.5-8%), so the pairs' Jaccard similarities on 5-word shingles span
  ~0.45-0.99, above and below 0.8. Every pair inside a cluster is a planted pair (variant-
  variant pairs too) with its exact Jaccard similarity, computed on the normalised words;
- junk rows (about 2%): 2-4 token texts, symbol soup, long base64-like blobs, one line repeated;
  each unique, so none is a duplicate of another.
Copies and variants appear 1-50,000 rows after their original (at most a quarter of the
corpus's rows).
"""
from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import re
import sys
import time
from pathlib import Path

import numpy as np

SUPPORT_WORDS = """
the a an and or but to of in on for with at by from about as into over after before between
i you we they he she it my your our their me us them this that these those is are was were be
been being have has had do does did not no yes can could would should will may might must
please thanks thank hello hi dear regards best team support customer agent ticket case issue
problem error order refund invoice payment charge charged billing account password login
reset email address phone number shipping delivery package parcel tracking arrived delayed
damaged broken missing wrong item product replacement return warranty subscription plan
upgrade downgrade cancel cancelled renew renewal card bank transfer credit debit receipt
update app website browser mobile android iphone laptop printer router modem screen battery
charger cable firmware software version install installed crash crashes freezes slow fast
again still already yet today yesterday tomorrow week month morning evening urgent asap
soon help need want tried try trying contact contacted call called chat message reply
response waiting wait hours days minutes time since when where why how what which who
store online checkout cart discount coupon code promo price total amount fee fees tax
shipment courier warehouse stock available unavailable backorder confirm confirmation
verify verification link expired code sms notification settings profile username data
export import sync backup restore file files upload download attachment screenshot photo
manager supervisor escalate escalation complaint feedback review rating experience service
quality late early exchange size color model serial address apartment street city zip
""".split()

TEMPLATES = [
    "I ordered the {w} {w} on {date} and it still has not arrived.",
    "My order {order} was charged twice for {amount}.",
    "The {w} stopped working after the last {w} update.",
    "Can you please send me a new {w} link for my account?",
    "I have been waiting {n} days for a reply about {order}.",
    "The tracking number {track} shows the parcel stuck in {w}.",
    "I would like a refund of {amount} for the {w} I returned on {date}.",
    "When I open the {w} page the app crashes with error {code}.",
    "Please cancel my {w} subscription before the renewal on {date}.",
    "The invoice {inv} lists a {w} I never ordered.",
    "My card ending in {n4} was declined although the bank says it is fine.",
    "The replacement {w} you sent is the wrong {w} again.",
    "I changed my {w} address to {street} but the package went to the old one.",
    "Your agent {name} promised a call back on {date} but nobody called.",
    "The {w} {w} is missing from the box I received yesterday.",
    "Login fails with code {code} on both the {w} and the website.",
    "I was charged a {w} fee of {amount} that was not shown at checkout.",
    "Could you escalate ticket {ticket} to a supervisor please?",
    "The battery of my {w} drains in {n} hours since the update.",
    "I tried resetting the {w} three times and it still shows {code}.",
    "The coupon {promo} was not applied to order {order}.",
    "Please confirm that my return {ret} was received by the warehouse.",
    "The {w} screen flickers whenever I connect the {w} cable.",
    "I never received the verification {w} for my new {w} account.",
    "Delivery was scheduled for {date} between {n} and {n2} but the courier never came.",
    "My {w} shows the status {w} for order {order} since last week.",
    "The size {n} {w} I ordered fits like a size {n2}.",
    "I would like to upgrade my plan from {w} to {w} this month.",
    "The export of my {w} data to CSV stops at {n} percent.",
    "The router {w} drops the connection every {n} minutes.",
]
CLOSINGS = [
    "Thank you for your help.", "Thanks in advance.", "Best regards,", "Kind regards,",
    "Looking forward to your reply.", "Please get back to me as soon as possible.",
    "I appreciate your help with this.", "Cheers,", "Regards,", "Sincerely,",
]
GREETINGS = ["Hello support team,", "Hi,", "Dear customer service,", "Hello,", "Hi there,",
             "Good morning,", "To whom it may concern,", "Dear team,"]
FIRST = ["Anna", "Ben", "Carla", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas",
         "Kemal", "Lena", "Marco", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara",
         "Umar", "Vera", "Wei", "Ximena", "Yusuf", "Zoe"]
LAST = ["Smith", "Garcia", "Müller", "Rossi", "Kowalski", "Nguyen", "Okafor", "Tanaka", "Silva",
        "Dubois", "Jansen", "Novak", "Larsen", "Haddad", "Ivanova", "Costa", "Fischer", "Ahmed"]

SYLLABLES = ("ka ri to me lu sa no vi de ra po ti ne gu ba lo fe mi zu ha ko se ru da pe ni "
             "go ta li mo ve su ki na bo re fa ju co tri pla ster mon gar bel dor fin lan "
             "mar quo zen vox rex tal sul pre con dis").split()

WORD_RE = re.compile(r"[\W_]+")


def normalize_words(text: str) -> list[str]:
    """Lower case, every run of non-word characters (and _) one separator: the normalisation of
    prep's NormalizeForDedup, close enough for the ground truth's Jaccard values."""
    return [w for w in WORD_RE.split(text.lower()) if w]


def shingles(text: str, k: int = 5) -> set:
    """The text's k-word shingles (as tuples of words); a shorter text is one shingle."""
    words = normalize_words(text)
    if len(words) < k:
        return {tuple(words)} if words else set()
    return set(zip(*(words[i:] for i in range(k))))


def jaccard_sets(sa: set, sb: set) -> float:
    if not sa and not sb:
        return 1.0
    inter = len(sa & sb)
    return inter / (len(sa) + len(sb) - inter)


def jaccard(a: str, b: str, k: int = 5) -> float:
    return jaccard_sets(shingles(a, k), shingles(b, k))


class Generator:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.np = np.random.default_rng(seed)
        vocab = list(dict.fromkeys(SUPPORT_WORDS))
        seen = set(vocab)
        vr = np.random.default_rng(seed * 7919 + 1)
        while len(vocab) < 24_000:
            lens = vr.choice((2, 3, 3, 4), size=20_000)
            parts = vr.integers(0, len(SYLLABLES), size=(20_000, 4))
            for n, row in zip(lens.tolist(), parts.tolist()):
                w = "".join(SYLLABLES[k] for k in row[:n])
                if w not in seen:
                    seen.add(w)
                    vocab.append(w)
                    if len(vocab) == 24_000:
                        break
        self.vocab = np.array(vocab, dtype=object)
        # Zipf-like weights; the common support words first.
        ranks = np.arange(len(vocab), dtype=np.float64)
        p = 1.0 / (ranks + 20.0) ** 1.05
        self.cum = np.cumsum(p / p.sum())
        self.buf: list[str] = []
        self.rand = self.rng.random

    def words(self, n: int) -> list[str]:
        """n Zipf-distributed words (drawn in blocks: numpy per word would be slow)."""
        if len(self.buf) < n:
            draw = max(n, 200_000)
            idx = np.searchsorted(self.cum, self.np.random(draw), side="right")
            idx = np.minimum(idx, len(self.cum) - 1)
            self.buf = self.vocab[idx].tolist() + self.buf
        out = self.buf[-n:]
        del self.buf[-n:]
        return out

    def ri(self, lo: int, hi: int) -> int:
        """randint without its overhead (this loop makes every byte of the corpus)."""
        return lo + int(self.rand() * (hi - lo + 1))

    def pick(self, seq):
        return seq[int(self.rand() * len(seq))]

    def fill(self, template: str) -> str:
        ri = self.ri
        out, i = [], 0
        while True:
            j = template.find("{", i)
            if j < 0:
                out.append(template[i:])
                return "".join(out)
            out.append(template[i:j])
            k = template.index("}", j)
            slot = template[j + 1:k]
            if slot == "w":
                out.append(self.words(1)[0])
            elif slot == "date":
                out.append(f"{ri(2019, 2026)}-{ri(1, 12):02d}-{ri(1, 28):02d}")
            elif slot == "order":
                out.append(f"ORD-{ri(0, 999999):06d}")
            elif slot == "amount":
                out.append(f"${ri(1, 2000)}.{ri(0, 99):02d}")
            elif slot in ("n", "n2"):
                out.append(str(ri(2, 99)))
            elif slot == "n4":
                out.append(f"{ri(0, 9999):04d}")
            elif slot == "code":
                out.append(f"E{ri(100, 9999)}")
            elif slot == "track":
                out.append(f"1Z{ri(10**9, 10**10 - 1)}")
            elif slot == "inv":
                out.append(f"INV-{ri(10000, 999999)}")
            elif slot == "ticket":
                out.append(f"#{ri(100000, 9999999)}")
            elif slot == "promo":
                out.append("".join(self.pick("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(8)))
            elif slot == "ret":
                out.append(f"RMA{ri(10000, 99999)}")
            elif slot == "street":
                out.append(f"{ri(1, 999)} {self.words(1)[0].capitalize()} Street")
            elif slot == "name":
                out.append(self.pick(FIRST))
            else:
                out.append(slot)
            i = k + 1

    def paragraph(self, ws: list[str], pos: int, sentences: int) -> tuple[str, int]:
        """`sentences` sentences from ws[pos:] (or templates); returns (text, new pos)."""
        rand, ri = self.rand, self.ri
        out = []
        for _ in range(sentences):
            if rand() < 0.2:
                out.append(self.fill(self.pick(TEMPLATES)))
                continue
            n = ri(5, 22)
            s = ws[pos:pos + n]
            pos += n
            if len(s) < n:
                s = self.words(n)
            s[0] = s[0].capitalize()
            if n > 8 and rand() < 0.3:
                s[ri(2, n - 3)] += ","
            out.append(" ".join(s) + self.pick(".....?!"))
        return " ".join(out), pos

    def ticket(self) -> str:
        rand, ri = self.rand, self.ri
        # log-normal length: median ~2.1 KB, mean ~2.7 KB, 0.3-12 KB
        target = min(12_000, max(300, int(math.exp(self.rng.gauss(7.65, 0.55)))))
        ws = self.words(target // 6 + 30)  # about the words the paragraphs use, drawn at once
        subject = " ".join(self.words(ri(3, 8))).capitalize()
        parts = [f"Subject: {subject}", "", self.pick(GREETINGS), ""]
        size = sum(len(p) + 1 for p in parts)
        pos = 0
        while size < target:
            para, pos = self.paragraph(ws, pos, ri(2, 7))
            parts.append(para)
            parts.append("")
            size += len(para) + 2
        parts.append(self.pick(CLOSINGS))
        parts.append(f"{self.pick(FIRST)} {self.pick(LAST)}")
        if pos < len(ws):  # give back the words not used, so the draws stay in blocks
            self.buf.extend(ws[pos:])
        return "\n".join(parts)

    def variant(self, text: str, frac: float) -> str:
        """The text with about `frac` of its words substituted, inserted or deleted."""
        rand = self.rand
        toks = text.split(" ")
        edits = max(1, round(frac * len(toks)))
        for _ in range(edits):
            op = rand()
            pos = int(rand() * len(toks))
            if op < 0.5:
                toks[pos] = self.words(1)[0]
            elif op < 0.75:
                toks.insert(pos, self.words(1)[0])
            elif len(toks) > 10:
                del toks[pos]
        return " ".join(toks)

    def case_space_copy(self, text: str) -> str:
        """Equal after normalisation: other letter case and whitespace."""
        t = text.upper() if self.rand() < 0.5 else text.lower()
        return t.replace(" ", "  ", 3).replace("\n", " \n") + "  "

    def junk(self) -> str:
        ri, pick = self.ri, self.pick
        kind = ri(0, 3)
        if kind == 0:  # 1-3 words (uniform over the vocabulary, not Zipf) and a number: short,
            # and still unique (common words alone would repeat: "ok", "thanks")
            return " ".join(pick(self.vocab) for _ in range(ri(1, 3))) + f" {ri(0, 10**7)}"
        if kind == 1:  # symbol soup (with letters: unique after normalisation)
            alphabet = "#@!$%^&*()[]{}<>~|;:/\\=+-_abcdefghijklmnopqrstuvwxyz0123456789  "
            return "".join(pick(alphabet) for _ in range(ri(40, 600)))
        if kind == 2:  # a base64-like blob
            alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
            return "".join(pick(alphabet) for _ in range(ri(200, 3000)))
        line = " ".join(self.words(ri(5, 8)))  # one line repeated (5+ words: unique)
        return "\n".join([line] * ri(5, 60))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--size-mb", type=float, default=1024.0)
    ap.add_argument("--seed", type=int, default=25)
    ap.add_argument("--shards", type=int, default=0, help="JSONL files (default: 64 MB each, at least 2)")
    ap.add_argument("--exact-frac", type=float, default=0.03, help="originals that get exact copies")
    ap.add_argument("--near-frac", type=float, default=0.05, help="originals that get near-duplicates")
    ap.add_argument("--junk-frac", type=float, default=0.02, help="rows that are junk")
    args = ap.parse_args()

    target = int(args.size_mb * 1_000_000)
    shards = args.shards or max(2, min(64, round(args.size_mb / 64)))
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("part-*.jsonl"):
        old.unlink()
    files = [open(args.out / f"part-{i:05d}.jsonl", "w", encoding="utf-8") for i in range(shards)]
    truth = open(args.out / "truth.jsonl", "w", encoding="utf-8")
    g = Generator(args.seed)
    r = g.rng
    t0 = time.monotonic()

    # Copies wait in a heap until their row comes: (row, seq, text, customer, cluster).
    pending: list[tuple[int, int, str, str, str]] = []
    pending_bytes = 0
    window = max(20, min(50_000, target // 2700 // 4))  # how far after its original a copy lands
    clusters: dict[str, list[tuple[str, set]]] = {}  # cluster -> [(id, shingles)] until complete
    remaining: dict[str, int] = {}
    counts = {"rows": 0, "originals": 0, "exact_copies": 0, "exact_normalized_copies": 0,
              "near_variants": 0, "junk": 0, "exact_groups": 0, "near_clusters": 0,
              "exact_pairs": 0, "near_pairs": 0, "near_pairs_ge_0.8": 0}
    written = 0
    row = seq = 0
    dumps = json.dumps
    rand, ri, pick = g.rand, g.ri, g.pick

    def emit(text: str, customer: str) -> str:
        nonlocal written, row
        doc_id = f"TCK-{row:09d}"
        line = dumps({"id": doc_id, "customer_id": customer, "text": text}, ensure_ascii=False)
        files[row % shards].write(line + "\n")
        written += len(line.encode()) + 1
        row += 1
        return doc_id

    def close_member(cluster: str, doc_id: str, text: str) -> None:
        members = clusters[cluster]
        kind = "exact" if cluster.startswith("x") else "near"
        sh = shingles(text) if kind == "near" else set()
        for other_id, other_sh in members:
            jac = 1.0 if kind == "exact" else round(jaccard_sets(other_sh, sh), 4)
            truth.write(dumps({"a": other_id, "b": doc_id, "kind": kind, "jaccard": jac}) + "\n")
            counts[f"{kind}_pairs"] += 1
            if kind == "near" and jac >= 0.8:
                counts["near_pairs_ge_0.8"] += 1
        members.append((doc_id, sh))
        remaining[cluster] -= 1
        if remaining[cluster] == 0:
            del clusters[cluster], remaining[cluster]

    while written + pending_bytes < target or pending:
        if pending and (pending[0][0] <= row or written + pending_bytes >= target):
            _, _, text, customer, cluster = heapq.heappop(pending)
            pending_bytes -= len(text) + 60
            doc_id = emit(text, customer)
            close_member(cluster, doc_id, text)
            continue
        if rand() < args.junk_frac:
            emit(g.junk(), f"CUST-{ri(0, 59_999):06d}")
            counts["junk"] += 1
            continue
        text = g.ticket()
        customer = f"CUST-{ri(0, 59_999):06d}"
        doc_id = emit(text, customer)
        counts["originals"] += 1
        u = rand()
        copies: list[tuple[str, str]] = []
        if u < args.exact_frac:
            cluster = f"x{doc_id}"
            counts["exact_groups"] += 1
            for _ in range(pick((1, 1, 2))):
                if rand() < 1 / 3:
                    copies.append((g.case_space_copy(text), "exact_normalized_copies"))
                else:
                    copies.append((text, "exact_copies"))
        elif u < args.exact_frac + args.near_frac:
            cluster = f"n{doc_id}"
            counts["near_clusters"] += 1
            for _ in range(pick((1, 1, 2, 2, 3, 4))):
                frac = (0.002 + 0.020 * rand()) if rand() < 0.6 else (0.025 + 0.055 * rand())
                copies.append((g.variant(text, frac), "near_variants"))
        if copies:
            clusters[cluster] = [(doc_id, shingles(text) if cluster[0] == "n" else set())]
            remaining[cluster] = len(copies)
            for copy, what in copies:
                counts[what] += 1
                seq += 1
                cust = customer if rand() < 0.5 else f"CUST-{ri(0, 59_999):06d}"
                heapq.heappush(pending, (row + ri(1, window), seq, copy, cust, cluster))
                pending_bytes += len(copy) + 60

    for f in files:
        f.close()
    truth.close()
    counts["rows"] = row
    meta = {"seed": args.seed, "size_mb": args.size_mb, "bytes": written, "shards": shards,
            "files": [f"part-{i:05d}.jsonl" for i in range(shards)],
            "fractions": {"exact": args.exact_frac, "near": args.near_frac, "junk": args.junk_frac},
            "counts": counts, "seconds": round(time.monotonic() - t0, 2)}
    (args.out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps(meta), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

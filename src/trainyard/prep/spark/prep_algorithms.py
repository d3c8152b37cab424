"""The deterministic algorithms of `trainyard prep`, in Python, for the Spark engine.

Each function reproduces, bit for bit, its C++ counterpart in src/trainyard/prep/ as specified
in docs/prep.md ("Algorithms"): NormalizeForDedup, RepetitionRatio, EnglishScore, ExactHash,
MinHash signatures and band keys, PII redaction, AssignSplit, DocId and the chat templates.
Texts are Python str (Spark's strings are UTF-8); byte-level rules (PII, lengths in bytes)
work on the UTF-8 encoding. Pure Python plus numpy and xxhash; no Spark here, so the Spark
workers import it as a plain module (SparkContext.addPyFile).
"""

from __future__ import annotations

import hashlib
import socket
import unicodedata

import numpy as np
import xxhash

# ---- normalization ----------------------------------------------------------------------------

# Unicode's White_Space property (PropList.txt), which str.isspace() does not match exactly.
_WHITE_SPACE = frozenset([*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                          0x2028, 0x2029, 0x202F, 0x205F, 0x3000])
_PUNCT = frozenset(["Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"])
_SEPARATOR_CACHE: dict[str, bool] = {}


def _is_separator(ch: str) -> bool:
    s = _SEPARATOR_CACHE.get(ch)
    if s is None:
        cp = ord(ch)
        s = cp in _WHITE_SPACE or (not 0xDC80 <= cp <= 0xDCFF and
                                   unicodedata.category(ch) in _PUNCT)
        _SEPARATOR_CACHE[ch] = s
    return s


def normalize_for_dedup(text: str) -> str:
    """Case-folded words separated by single spaces (docs/prep.md "Normalization")."""
    out = []
    pending = False
    for ch in text:
        if _is_separator(ch):
            pending = bool(out)
            continue
        if pending:
            out.append(" ")
            pending = False
        # Lone surrogates (surrogateescape'd bytes) are kept as they are, never folded.
        out.append(ch if 0xD800 <= ord(ch) <= 0xDFFF else ch.casefold())
    return "".join(out)


def words(normalized: str) -> list[str]:
    return normalized.split(" ") if normalized else []


def _utf8(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


# ---- regular expressions: PCRE2, as the native engine matches them ------------------------------

class RegexError(ValueError):
    pass


class _Pcre2:
    """Debian's libpcre2-8 (the library the native engine links) through ctypes."""

    NEVER_UTF = 0x00001000
    NEVER_BACKSLASH_C = 0x00100000
    JIT_COMPLETE = 0x00000001
    NO_JIT = 0x00002000
    ERROR_NOMATCH = -1

    def __init__(self):
        import ctypes
        import ctypes.util
        name = ctypes.util.find_library("pcre2-8") or "libpcre2-8.so.0"
        try:
            lib = ctypes.CDLL(name)
        except OSError as e:
            raise RegexError(f"the Spark engine matches regular expressions with PCRE2 as the "
                             f"native engine does, and cannot load {name} ({e}): install "
                             "libpcre2-8-0 on the Spark workers") from e
        p, size, u32, i32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_int
        for fn, res, args in (
                ("pcre2_compile_8", p, [ctypes.c_char_p, size, u32, ctypes.POINTER(i32),
                                        ctypes.POINTER(size), p]),
                ("pcre2_jit_compile_8", i32, [p, u32]),
                ("pcre2_get_error_message_8", i32, [i32, ctypes.c_char_p, size]),
                ("pcre2_match_context_create_8", p, [p]),
                ("pcre2_set_match_limit_8", i32, [p, u32]),
                ("pcre2_set_depth_limit_8", i32, [p, u32]),
                ("pcre2_set_heap_limit_8", i32, [p, u32]),
                ("pcre2_match_data_create_from_pattern_8", p, [p, p]),
                ("pcre2_match_8", i32, [p, ctypes.c_char_p, size, size, u32, p, p]),
                ("pcre2_get_ovector_pointer_8", ctypes.POINTER(size), [p]),
                ("pcre2_get_ovector_count_8", u32, [p])):
            f = getattr(lib, fn)
            f.restype, f.argtypes = res, args
        self.lib, self.ctypes = lib, ctypes

    def error_message(self, code: int) -> str:
        buf = self.ctypes.create_string_buffer(256)
        self.lib.pcre2_get_error_message_8(code, buf, len(buf))
        return buf.value.decode("utf-8", "replace")


_PCRE2: _Pcre2 | None = None


class Regex:
    """common/regex.h's BoundedRegex: a PCRE2 pattern matched byte-wise over the UTF-8 text
    (PCRE2_NEVER_UTF | PCRE2_NEVER_BACKSLASH_C, no other options), JIT-compiled where it can be
    and interpreted where the JIT stack runs out, with the same match, depth and heap limits.
    search() is BoundedRegex::Search, finditer() its ForEachMatch (whole-match spans)."""

    MATCH, NO_MATCH, LIMIT = 1, 0, -1

    def __init__(self, pattern: str, match_limit: int = 1_000_000, depth_limit: int = 10_000,
                 heap_limit_kib: int = 20_000):
        global _PCRE2
        if _PCRE2 is None:
            _PCRE2 = _Pcre2()
        pc = _PCRE2
        ct = pc.ctypes
        raw = _utf8(pattern)
        if b"\0" in raw:
            raise RegexError(f"{pattern!r}: a pattern must not contain a NUL byte")
        error, offset = ct.c_int(0), ct.c_size_t(0)
        self.code = pc.lib.pcre2_compile_8(raw, len(raw), pc.NEVER_UTF | pc.NEVER_BACKSLASH_C,
                                           ct.byref(error), ct.byref(offset), None)
        if not self.code:
            raise RegexError(f"{pattern!r} is not a valid regular expression (PCRE2 syntax): "
                             f"{pc.error_message(error.value)} at offset {offset.value}")
        self.jit = pc.lib.pcre2_jit_compile_8(self.code, pc.JIT_COMPLETE) == 0
        self.context = pc.lib.pcre2_match_context_create_8(None)
        pc.lib.pcre2_set_match_limit_8(self.context, match_limit)
        pc.lib.pcre2_set_depth_limit_8(self.context, depth_limit)
        pc.lib.pcre2_set_heap_limit_8(self.context, heap_limit_kib)
        # One match data per Regex: a Regex is used by one thread (a UDF's worker) at a time.
        self.match_data = pc.lib.pcre2_match_data_create_from_pattern_8(self.code, None)
        self.pattern = pattern
        self._pc = pc
        # (The compiled pattern lives as long as the process's cache of it: not freed.)

    def _match_at(self, t: bytes, start: int) -> int:
        lib = self._pc.lib
        rc = lib.pcre2_match_8(self.code, t, len(t), start, 0, self.match_data, self.context)
        if rc < 0 and rc != self._pc.ERROR_NOMATCH and self.jit:
            rc = lib.pcre2_match_8(self.code, t, len(t), start, self._pc.NO_JIT,
                                   self.match_data, self.context)
        return rc

    def search(self, text: str | bytes) -> int:
        """MATCH, NO_MATCH, or LIMIT when a limit stopped it (the native engine's kLimit)."""
        t = text if isinstance(text, bytes) else _utf8(text)
        rc = self._match_at(t, 0)
        if rc >= 0:
            return self.MATCH
        return self.NO_MATCH if rc == self._pc.ERROR_NOMATCH else self.LIMIT

    def finditer(self, t: bytes):
        """The (begin, end) byte spans of successive matches, as ForEachMatch finds them; ends
        at a limit."""
        start = 0
        while start <= len(t):
            rc = self._match_at(t, start)
            if rc < 0:
                return
            ov = self._pc.lib.pcre2_get_ovector_pointer_8(self.match_data)
            begin, end = ov[0], ov[1]
            if end < begin or end > len(t):
                return
            yield begin, end
            start = end if end > begin else begin + 1


_REGEX_CACHE: dict[str, Regex] = {}


def regex(pattern: str) -> Regex:
    """The compiled pattern, compiled once per process (a Spark worker's UDFs share it)."""
    r = _REGEX_CACHE.get(pattern)
    if r is None:
        r = _REGEX_CACHE[pattern] = Regex(pattern)
    return r


# ---- quality heuristics -----------------------------------------------------------------------

def repetition_ratio(text: str) -> float:
    raw = _utf8(text)
    lines = [line.strip(b" \t\r\v\f") for line in raw.split(b"\n")]
    lines = [line for line in lines if line]
    if len(lines) >= 2:
        seen = set()
        dup = 0
        total = 0
        for line in lines:
            total += len(line)
            if line in seen:
                dup += len(line)
            else:
                seen.add(line)
        return dup / total
    w = [_utf8(x) for x in words(normalize_for_dedup(text))]
    if len(w) < 3:
        return 0.0
    repeated = [False] * len(w)
    seen = set()
    for i in range(len(w) - 2):
        gram = (w[i], w[i + 1], w[i + 2])
        if gram in seen:
            repeated[i] = repeated[i + 1] = repeated[i + 2] = True
        else:
            seen.add(gram)
    total = sum(len(x) for x in w)
    dup = sum(len(x) for x, r in zip(w, repeated) if r)
    return dup / total


ENGLISH_WORDS = frozenset("""
a about after again all also am an and any are as at be because been before being both but by
can could did do does each few for from had has have he her here him his how i if in into is it
its just me more most my no not now of on one only or other our out over please she should so
some such than that the their them then there these they this those to under up us very was we
were what when where which while who why will with would you your""".split())
assert len(ENGLISH_WORDS) == 100


def english_score(text: str) -> float:
    w = words(normalize_for_dedup(text))
    if not w:
        return 0.0
    return sum(1 for x in w if x in ENGLISH_WORDS) / len(w)


def code_points(text: str) -> int:
    """The native engine's character count: UTF-8 bytes that are not continuation bytes."""
    return sum(1 for b in _utf8(text) if (b & 0xC0) != 0x80)


# ---- exact dedup ------------------------------------------------------------------------------

def exact_hash_hex(text: str) -> str | None:
    """XXH3-128 of the normalized text as 32 hex digits (high, low); None without words."""
    normalized = normalize_for_dedup(text)
    if not normalized:
        return None
    return xxhash.xxh3_128_hexdigest(_utf8(normalized))


# ---- MinHash ----------------------------------------------------------------------------------

_MASK = (1 << 64) - 1


def splitmix64_coefficients(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    state = seed & _MASK
    a = np.empty(num_perm, dtype=np.uint64)
    b = np.empty(num_perm, dtype=np.uint64)

    def draw() -> int:
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & _MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    for i in range(num_perm):
        a[i] = draw() | 1
        b[i] = draw()
    return a, b


class MinHasher:
    """Signatures and band keys exactly as prep/minhash.h computes them (vectorised with numpy:
    one matrix of (a_i * x + b_i) >> 32 per document, wrapping uint64 arithmetic)."""

    def __init__(self, shingle_words: int = 5, bands: int = 14, rows: int = 8, seed: int = 1):
        self.k = shingle_words
        self.bands = bands
        self.rows = rows
        self.num_perm = bands * rows
        a, b = splitmix64_coefficients(self.num_perm, seed)
        self.a = a[:, None]
        self.b = b[:, None]

    def shingle_hashes(self, text: str) -> np.ndarray | None:
        w = words(normalize_for_dedup(text))
        if not w:
            return None
        if len(w) <= self.k:
            shingles = {" ".join(w)}
        else:
            shingles = {" ".join(w[i:i + self.k]) for i in range(len(w) - self.k + 1)}
        return np.fromiter((xxhash.xxh3_64_intdigest(_utf8(s)) for s in shingles),
                           dtype=np.uint64, count=len(shingles))

    def signature(self, text: str) -> np.ndarray | None:
        x = self.shingle_hashes(text)
        if x is None:
            return None
        with np.errstate(over="ignore"):
            h = (self.a * x[None, :] + self.b) >> np.uint64(32)
        return h.min(axis=1).astype(np.uint32)

    def band_keys(self, sig: np.ndarray) -> list[int]:
        le = sig.astype("<u4")
        return [xxhash.xxh3_64_intdigest(le[j * self.rows:(j + 1) * self.rows].tobytes(), seed=j)
                for j in range(self.bands)]


def estimated_jaccard(a, b) -> float:
    a = np.asarray(a, dtype=np.uint32)
    b = np.asarray(b, dtype=np.uint32)
    return float(np.count_nonzero(a == b)) / float(len(a))


def to_signed64(u: int) -> int:
    return u - (1 << 64) if u >= (1 << 63) else u


# ---- splits and ids ---------------------------------------------------------------------------

def assign_split(ratios: list[tuple[str, float]], seed: int, group_key: str) -> str:
    h = xxhash.xxh3_64_intdigest(_utf8(group_key), seed=seed & _MASK)
    u = (h >> 11) * 2.0 ** -53
    cumulative = 0.0
    for name, ratio in ratios:
        cumulative += ratio
        if cumulative > u:
            return name
    return ratios[-1][0]


def doc_id(source: str, key: str) -> str:
    data = b"trainyard-prep-v1\0" + _utf8(source) + b"\0" + _utf8(key)
    return hashlib.sha256(data).hexdigest()[:16]


# ---- chat templates (model/chat_template.cc) --------------------------------------------------

_TOKENIZERS: dict = {}


def load_tokenizer(tokenizer_json: str):
    """A Hugging Face `tokenizers` Tokenizer for a tokenizer.json's text, one per process (the
    native engine's model/tokenizer.h implements the same file format, and tests check both
    give the same ids)."""
    key = hashlib.sha256(tokenizer_json.encode("utf-8")).hexdigest()
    tok = _TOKENIZERS.get(key)
    if tok is None:
        from tokenizers import Tokenizer
        tok = _TOKENIZERS[key] = Tokenizer.from_str(tokenizer_json)
    return tok


def render_template(fmt: str, system: str, prompt: str, response: str | None) -> str:
    if fmt == "mistral":
        out = "[INST] " + (system + "\n\n" if system else "") + prompt + " [/INST]"
        return out + (" " + response if response is not None else "")
    if fmt == "chatml":
        out = ("<|im_start|>system\n" + system + "<|im_end|>\n") if system else ""
        out += "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n"
        return out + (response + "<|im_end|>" if response is not None else "")
    if fmt == "alpaca":
        out = (system + "\n\n" if system else "") + "### Instruction:\n" + prompt
        out += "\n\n### Response:\n"
        return out + (response if response is not None else "")
    raise ValueError(f'unknown prompt template "{fmt}"; use mistral, chatml or alpaca')


# ---- PII (prep/pii.cc), on UTF-8 bytes --------------------------------------------------------

def _digit(c: int) -> bool:
    return 48 <= c <= 57


def _upper(c: int) -> bool:
    return 65 <= c <= 90


def _alpha(c: int) -> bool:
    return 97 <= c <= 122 or _upper(c)


def _alnum(c: int) -> bool:
    return _digit(c) or _alpha(c)


def _hex(c: int) -> bool:
    return _digit(c) or 97 <= c <= 102 or 65 <= c <= 70


def _at(t: bytes, i: int) -> int:
    return t[i] if 0 <= i < len(t) else 0


def _before(t: bytes, i: int) -> int:
    return t[i - 1] if i > 0 else 0


def _digits_at(t: bytes, i: int) -> int:
    n = 0
    while _digit(_at(t, i + n)):
        n += 1
    return n


_LOCAL = frozenset(b"._%+-")
_DOMAIN = frozenset(b".-")


def _valid_domain(d: bytes) -> bool:
    labels = d.split(b".")
    for label in labels:
        if not label or label[0] == 45 or label[-1] == 45:
            return False
    last = labels[-1]
    return len(labels) >= 2 and len(last) >= 2 and all(_alpha(c) for c in last)


def _scan_email(t: bytes, kind: int, out: list) -> None:
    pos = 0
    while True:
        at = t.find(b"@", pos)
        if at < 0:
            return
        b = at
        while b > pos and (_alnum(t[b - 1]) or t[b - 1] in _LOCAL):
            b -= 1
        while b < at and t[b] == 46:
            b += 1
        e = at + 1
        while e < len(t) and (_alnum(t[e]) or t[e] in _DOMAIN):
            e += 1
        while e > at + 1 and t[e - 1] in (46, 45):
            e -= 1
        if b < at and t[at - 1] != 46 and _valid_domain(t[at + 1:e]):
            out.append((b, e, kind))
            pos = e
        else:
            pos = at + 1


def _phone_sep(c: int) -> bool:
    return c in (32, 45, 46)


def _phone_left_ok(t: bytes, i: int) -> bool:
    p = _before(t, i)
    return not _alnum(p) and p not in b"+-./_@"


def _number_right_ok(t: bytes, e: int) -> bool:
    n = _at(t, e)
    if _alnum(n):
        return False
    return not (n in b".-/," and n != 0 and _digit(_at(t, e + 1)))


def _parse_international(t: bytes, i: int) -> int:
    p = i + 1
    if not _digit(_at(t, p)):
        return 0
    digits = 0
    end = 0
    while True:
        d = _digits_at(t, p)
        if d > 0:
            digits += d
            p += d
            end = p
        elif _at(t, p) == 40 and _digits_at(t, p + 1) > 0 and \
                _at(t, p + 1 + _digits_at(t, p + 1)) == 41:
            g = _digits_at(t, p + 1)
            digits += g
            p += g + 2
            end = p
        else:
            break
        if digits > 15:
            return 0
        if _phone_sep(_at(t, p)) and (_digit(_at(t, p + 1)) or _at(t, p + 1) == 40):
            p += 1
        elif not (_at(t, p) == 40 or _digit(_at(t, p))):
            break
    if digits < 8 or digits > 15 or not _number_right_ok(t, end):
        return 0
    return end


def _parse_nanp_at(t: bytes, p: int) -> int:
    def n_digit(c: int) -> bool:
        return 50 <= c <= 57

    if _at(t, p) == 40:
        if _digits_at(t, p + 1) != 3 or not n_digit(t[p + 1]) or _at(t, p + 4) != 41:
            return 0
        q = p + 5
        if _at(t, q) == 32:
            q += 1
        if _digits_at(t, q) != 3 or not n_digit(t[q]):
            return 0
        s = _at(t, q + 3)
        if not _phone_sep(s) or _digits_at(t, q + 4) != 4:
            return 0
        end = q + 8
    else:
        if _digits_at(t, p) != 3 or not n_digit(t[p]):
            return 0
        s = _at(t, p + 3)
        if not _phone_sep(s) or _digits_at(t, p + 4) != 3 or not n_digit(t[p + 4]):
            return 0
        if _at(t, p + 7) != s or _digits_at(t, p + 8) != 4:
            return 0
        end = p + 12
    return end if _number_right_ok(t, end) else 0


def _parse_nanp(t: bytes, i: int) -> int:
    if _at(t, i) == 49 and _phone_sep(_at(t, i + 1)) and \
            (_digit(_at(t, i + 2)) or _at(t, i + 2) == 40):
        e = _parse_nanp_at(t, i + 2)
        if e:
            return e
    return _parse_nanp_at(t, i)


def _scan_phone(t: bytes, kind: int, out: list) -> None:
    i = 0
    while i < len(t):
        c = t[i]
        end = 0
        if (c == 43 or c == 40 or _digit(c)) and _phone_left_ok(t, i):
            end = _parse_international(t, i) if c == 43 else _parse_nanp(t, i)
        if end > i:
            out.append((i, end, kind))
            i = end
        else:
            i += 1


def luhn_valid(digits: bytes) -> bool:
    total = 0
    count = 0
    for c in reversed(digits):
        if not _digit(c):
            continue
        d = c - 48
        if count % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
        count += 1
    return count > 0 and total % 10 == 0


def _scan_card(t: bytes, kind: int, out: list) -> None:
    i = 0
    while i < len(t):
        if not _digit(t[i]):
            i += 1
            continue
        groups = []
        p = i
        while True:
            d = _digits_at(t, p)
            groups.append((p, p + d))
            p += d
            if _at(t, p) in (32, 45) and _digit(_at(t, p + 1)):
                p += 1
            else:
                break
        run_end = p

        def start_ok(g: int) -> bool:
            b = groups[g][0]
            prev = _before(t, b)
            if _alpha(prev):
                return False
            return not (prev in (46, 44) and _digit(_before(t, b - 1)))

        def end_ok(g: int) -> bool:
            e = groups[g][1]
            nxt = _at(t, e)
            if _alpha(nxt):
                return False
            return not (nxt in (46, 44) and _digit(_at(t, e + 1)))

        g0 = 0
        while g0 < len(groups):
            found = len(groups)
            if start_ok(g0):
                total = 0
                last = g0
                for g in range(g0, len(groups)):
                    if g > g0 and t[groups[g][0] - 1] != t[groups[g0 + 1][0] - 1]:
                        break
                    total += groups[g][1] - groups[g][0]
                    if total > 19:
                        break
                    last = g
                for g in range(last, g0 - 1, -1):
                    n = sum(groups[k][1] - groups[k][0] for k in range(g0, g + 1))
                    if n < 13:
                        break
                    if not end_ok(g):
                        continue
                    digits = b"".join(t[groups[k][0]:groups[k][1]] for k in range(g0, g + 1))
                    if luhn_valid(digits):
                        found = g
                        break
            if found < len(groups):
                out.append((groups[g0][0], groups[found][1], kind))
                g0 = found + 1
            else:
                g0 += 1
        i = run_end


def iban_checksum_valid(iban: bytes) -> bool:
    compact = bytearray()
    for c in iban:
        if c == 32:
            continue
        if not _alnum(c):
            return False
        compact.append(c)
    if len(compact) < 5:
        return False
    rotated = bytes(compact[4:] + compact[:4])
    rem = 0
    for c in rotated:
        if _digit(c):
            rem = (rem * 10 + (c - 48)) % 97
        else:
            v = (c - 97 if c >= 97 else c - 65) + 10
            rem = (rem * 100 + v) % 97
    return rem == 1


def _iban_shape(compact: bytes) -> bool:
    if not 15 <= len(compact) <= 34:
        return False
    if not (_upper(compact[0]) and _upper(compact[1]) and _digit(compact[2]) and
            _digit(compact[3])):
        return False
    return iban_checksum_valid(compact)


def _iban_char(c: int) -> bool:
    return _digit(c) or _upper(c)


def _scan_iban(t: bytes, kind: int, out: list) -> None:
    i = 0
    while i + 4 <= len(t):
        if not (_upper(t[i]) and _upper(t[i + 1]) and _digit(t[i + 2]) and _digit(t[i + 3]) and
                not _alnum(_before(t, i))):
            i += 1
            continue
        token_end = i
        while _alnum(_at(t, token_end)):
            token_end += 1
        end = 0
        if token_end - i >= 15:
            if all(_iban_char(c) for c in t[i:token_end]) and _iban_shape(t[i:token_end]):
                end = token_end
        elif token_end - i == 4 and _at(t, token_end) == 32:
            compact = bytearray(t[i:i + 4])
            ends = []
            p = token_end
            while _at(t, p) == 32 and _iban_char(_at(t, p + 1)):
                g = 0
                while _iban_char(_at(t, p + 1 + g)) and g < 5:
                    g += 1
                if g > 4 or _alnum(_at(t, p + 1 + g)):
                    break
                compact += t[p + 1:p + 1 + g]
                p += 1 + g
                ends.append((p, len(compact)))
                if g < 4 or len(compact) >= 34:
                    break
            for e, n in reversed(ends):
                if _iban_shape(bytes(compact[:n])):
                    end = e
                    break
        if end > i:
            out.append((i, end, kind))
            i = end
        else:
            i = max(token_end, i + 1)


def _after_version_word(t: bytes, i: int) -> bool:
    p = i
    while p > 0 and t[p - 1] in b" \t:=.":
        p -= 1
    e = p
    while p > 0 and _alpha(t[p - 1]):
        p -= 1
    return t[p:e].lower() in (b"v", b"ver", b"version")


def _octet_at(t: bytes, p: int) -> int:
    d = _digits_at(t, p)
    if d == 0 or d > 3 or (d > 1 and t[p] == 48):
        return 0
    return d if int(t[p:p + d]) <= 255 else 0


def _parse_ipv4(t: bytes, i: int) -> int:
    p = i
    for k in range(4):
        if k > 0:
            if _at(t, p) != 46:
                return 0
            p += 1
        d = _octet_at(t, p)
        if d == 0:
            return 0
        p += d
    n = _at(t, p)
    if _alnum(n) or (n == 46 and _alnum(_at(t, p + 1))):
        return 0
    return p


def _valid_ipv6(s: bytes) -> bool:
    if not 2 <= len(s) <= 45 or s.count(b":") < 2 or not any(_hex(c) for c in s):
        return False
    try:
        socket.inet_pton(socket.AF_INET6, s.decode("ascii"))
        return True
    except (OSError, ValueError):
        return False


def _ipv6_char(c: int) -> bool:
    return _hex(c) or c in (58, 46)


def _scan_ip(t: bytes, kind: int, out: list) -> None:
    i = 0
    while i < len(t):
        prev = _before(t, i)
        end = 0
        if not _alnum(prev) and prev != 46:
            if (_hex(t[i]) or t[i] == 58) and prev != 58:
                e = i
                while _ipv6_char(_at(t, e)):
                    e += 1
                for _ in range(3):
                    if e <= i:
                        break
                    if not _alnum(_at(t, e)) and _valid_ipv6(t[i:e]) and \
                            not (_at(t, e) == 58 and _hex(_at(t, e + 1))):
                        end = e
                        break
                    if t[e - 1] not in (46, 58):
                        break
                    e -= 1
            if end == 0 and _digit(t[i]) and not _after_version_word(t, i):
                end = _parse_ipv4(t, i)
        if end > i:
            out.append((i, end, kind))
            i = end
        else:
            i += 1


def _scan_regex(pattern: Regex, t: bytes, kind: int, out: list) -> None:
    last_end = 0
    for b, e in pattern.finditer(t):
        if b == e:
            continue
        for _ in range(3):
            if b > 0 and b < len(t) and (t[b] & 0xC0) == 0x80:
                b -= 1
        for _ in range(3):
            if e < len(t) and (t[e] & 0xC0) == 0x80:
                e += 1
        if b < last_end:
            continue
        out.append((b, e, kind))
        last_end = e


_BUILTIN = {"email": _scan_email, "phone": _scan_phone, "card": _scan_card,
            "iban": _scan_iban, "ip": _scan_ip}


class PiiRedactor:
    """prep/pii.h's PiiRedactor: builtin kinds first (in the spec's order), then patterns.
    Custom patterns are PCRE2 patterns matched as the native engine matches them (Regex)."""

    def __init__(self, kinds: list[str], patterns: list[tuple[str, str]],
                 replacement: str = "[{kind}]"):
        self.names: list[str] = []
        self.scanners = []
        for k in kinds:
            if k not in _BUILTIN:
                raise ValueError(f'unknown PII kind "{k}"; known: email, phone, card, iban, ip')
            self.names.append(k)
            self.scanners.append(_BUILTIN[k])
        for name, pattern in patterns:
            compiled = regex(pattern)
            self.names.append(name)
            self.scanners.append(lambda t, kind, out, c=compiled: _scan_regex(c, t, kind, out))
        self.replacements = [_utf8(replacement.replace("{kind}", n.upper())) for n in self.names]

    def find(self, t: bytes) -> list[tuple[int, int, int]]:
        per_kind = []
        for k, scan in enumerate(self.scanners):
            found: list = []
            scan(t, k, found)
            per_kind.append(found)
        nxt = [0] * len(per_kind)
        chosen = []
        cursor = 0
        while True:
            best = None
            for k, lst in enumerate(per_kind):
                while nxt[k] < len(lst) and lst[nxt[k]][0] < cursor:
                    nxt[k] += 1
                if nxt[k] == len(lst):
                    continue
                m = lst[nxt[k]]
                if best is None or m[0] < best[0] or \
                        (m[0] == best[0] and m[1] - m[0] > best[1] - best[0]):
                    best = m
            if best is None:
                break
            chosen.append(best)
            cursor = best[1]
        return chosen

    def redact(self, text: str) -> tuple[str, dict[str, int]]:
        t = _utf8(text)
        matches = self.find(t)
        if not matches:
            return text, {}
        counts: dict[str, int] = {}
        out = bytearray()
        pos = 0
        for b, e, k in matches:
            out += t[pos:b]
            out += self.replacements[k]
            pos = e
            counts[self.names[k]] = counts.get(self.names[k], 0) + 1
        out += t[pos:]
        return bytes(out).decode("utf-8", "surrogateescape"), counts

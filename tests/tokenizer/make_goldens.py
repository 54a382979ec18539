#!/usr/bin/env python3
"""tests/tokenizer/make_goldens.py - writes the tokenizer corpus and its golden ids.

Owns: the deterministic test corpus (corpus.txt, one JSON string per line) and, for each
tokenizer, golden_<name>.txt with the ids HF `tokenizers` gives for every corpus string in
both of runtime/text/tokenizer.h's modes:
  special != 0  Tokenizer.encode(text, add_special_tokens=False).ids  (added tokens matched)
  special == 0  the same through a copy of the tokenizer whose "added_tokens" list is empty,
                so no added token is matched and all text goes through normaliser + BPE
                (the vocab, and so the ids of those pieces, is unchanged).
Does not own: the C side (test_tokenizer.c reads these files).

Tokenizers:
  gemma3        ../shared/data/gemma3-tokenizer/tokenizer.json (path given as argument)
  gemma4-style  the same with the added tokens at ids 46..52, 98, 100, 101, 105, 106 renamed
                to Gemma 4's control tokens, in added_tokens AND model.vocab (HF gives an
                added token whose content is not in the vocab a fresh id), and marked special;
                test_tokenizer.c builds the same variant in memory with jansson.
  tiny          tests/fixtures/tiny-moe/tokenizer.json (the three tiny fixtures share it)
  trained       tests/fixtures/trained-tiny-moe/tokenizer.json (the three trained fixtures
                share it), over the committed corpus.txt as it stands:
                `make_goldens.py --trained` writes golden_trained.txt alone

Every corpus string must round-trip in every tokenizer: decode(ids, skip_special_tokens=False)
== text. Generated strings that do not (none expected) are dropped; hand-written ones must.
The corpus has no U+2581: the decoder turns it into a space, so it cannot round-trip.

Golden line format (first line a '#' comment naming the source):
  <ids with special matched, space-separated>\t<ids with special == 0>

Usage: python3 tests/tokenizer/make_goldens.py ../shared/data/gemma3-tokenizer/tokenizer.json
"""
import copy
import hashlib
import json
import os
import random
import sys

import tokenizers
from tokenizers import Tokenizer

TOKENIZERS_VERSION = "0.23.2"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TINY = os.path.join(ROOT, "tests", "fixtures", "tiny-moe", "tokenizer.json")
TRAINED = os.path.join(ROOT, "tests", "fixtures", "trained-tiny-moe", "tokenizer.json")

GEMMA4_CONTROL = {
    46: "<|tool>", 47: "<tool|>", 48: "<|tool_call>", 49: "<tool_call|>",
    50: "<|tool_response>", 51: "<tool_response|>", 52: '<|"|>', 98: "<|think|>",
    100: "<|channel>", 101: "<channel|>", 105: "<|turn>", 106: "<turn|>",
}

# ---- corpus --------------------------------------------------------------------------------

HAND = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t \t\n\n\t  ",
    "a", "Hello", "Hello world", " Hello", "Hello ", "  leading and trailing  ",
    "Hello, world! How are you today?", "The quick brown fox jumps over the lazy dog.",
    "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<bos>Hello", "Hello<eos>", "<bos><bos>",
    "<<bos>>", "<bos", "bos>", "< bos >",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<|turn>user\nhi<turn|>", "<|turn>system\nYou are helpful.<turn|>\n<|turn>user\nWhat?<turn|>\n",
    "<|turn>model\n<|channel>thought\nhmm<channel|>Answer<turn|>", "<|think|>", "<|think>",
    '<|tool_call>call:get_weather{location:<|"|>Tokyo<|"|>}<tool_call|>',
    "<|tool>declaration<tool|>", "<|tool_response>{}<tool_response|>", "<|tur", "<|turn",
    "turn|>", "<turn|", "<|turn>>", "<<|turn>", "<unused0>", "<unused12><unused13>", "<unused",
    "<unused99999>", "<start_of_image>", "<end_of_image>", "<image_soft_token>", "[multimodal]",
    "<table><tr><td>1</td></tr></table>", "<b>bold</b> and <i>italic</i>", "<h1>Title</h1>",
    "<div class=\"x\">hi</div>", "<code>x = 1</code>", "</blockquote>",
    "\u00e9", "na\u00efve caf\u00e9", "\u00c5ngstr\u00f6m", "Stra\u00dfe", "\u0130stanbul",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1",
    "\u4f60\u597d\uff0c\u4e16\u754c\u3002", "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
    "\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466",
    "\U0001F3F3\uFE0F\u200D\U0001F308", "\U0001F1EF\U0001F1F5", "1\uFE0F\u20E3", "\u2764\uFE0F",
    "\U0001F9D1\U0001F3FF\u200D\U0001F4BB", "\U0001F469\U0001F3FB\u200D\u2764\uFE0F\u200D\U0001F468\U0001F3FE",
    "\ufffd", "\ufffd\ufffd", "a\ufffdb", "\ue000", "\uf8ff", "\U000F0000", "\U0010FFFD",
    "\U00020000\U0002A6DF", "\x00", "a\x00b", "\x01\x02\x1f\x7f", "\u200b", "\u00ad", "\ufeffBOM",
    "\u2028\u2029", "\u3000\u3000", "\u00a0nbsp\u00a0", "<0x41>", "<0xFF>", "<0x0A>",
    "0", "12", "123", "1234", "12345", "3.14159", "-42", "1e-9", "1,000,000", "0x1F", "2024-01-31",
    "x" * 1000, "ab" * 700, "\u4e00" * 500, "\U0001F600" * 100, " " * 100, "\n" * 70, "\t" * 40,
    "word" * 300,
    "def f(x):\n    return x * 2\n", "int main(void) {\n\treturn 0;\n}\n",
    '{"a": [1, 2, 3], "b": null}', "SELECT * FROM t WHERE id = 1;", "if (a && b || !c) { x++; }",
    "    indented\n        more\n", "line1\r\nline2\r\n", "trailing spaces   \n",
]


def rand_words(rng, alphabet, n_words, lo=1, hi=9):
    return [''.join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi))) for _ in range(n_words)]


def cps(a, b):
    return [chr(c) for c in range(a, b + 1)]


SCRIPTS = {
    "latin": cps(0x61, 0x7A) + cps(0x41, 0x5A) + list("\u00e0\u00e9\u00ee\u00f5\u00fc\u00e7\u00f1\u00df"),
    "cyrillic": cps(0x430, 0x44F) + cps(0x410, 0x42F),
    "greek": cps(0x3B1, 0x3C9) + cps(0x391, 0x3A9),
    "cjk": cps(0x4E00, 0x4FFF) + cps(0x3041, 0x3096) + cps(0x30A1, 0x30FA),
    "hangul": cps(0xAC00, 0xAD00),
    "arabic": cps(0x621, 0x64A),
    "hebrew": cps(0x5D0, 0x5EA),
    "devanagari": cps(0x905, 0x939) + cps(0x93E, 0x94D),
    "thai": cps(0xE01, 0xE2E) + cps(0xE30, 0xE3A),
}
EMOJI = ["\U0001F600", "\U0001F680", "\U0001F44D", "\U0001F44D\U0001F3FB", "\U0001F44B\U0001F3FF",
         "\U0001F468\u200D\U0001F4BB", "\U0001F469\u200D\U0001F52C", "\U0001F3F3\uFE0F\u200D\U0001F308",
         "\U0001F1FA\U0001F1F8", "\U0001F1E9\U0001F1EA", "\u2728", "\U0001F525", "\U0001F9E0",
         "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F926\U0001F3FD\u200D\u2640\uFE0F"]
CONTROL = ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<|turn>", "<turn|>", "<|think|>",
           "<|channel>", "<channel|>", '<|"|>', "<|tool_call>", "<tool_call|>", "<unused7>",
           "<table>", "</td>", "<b>", "\n\n", "\t\t\t", "<start_of_image>", "<mask>", "<|tur",
           "<|turn", "<unused", "<", ">", "|>", "<|"]
WHITESPACE = [" ", "\t", "\n", "\r", "\r\n", "\u3000", "\u00a0", "\u2003", "\v", "\f"]
RARE = cps(0xE000, 0xE0FF) + cps(0xF0000, 0xF00FF) + cps(0x20000, 0x200FF) + cps(0x1D400, 0x1D4FF) + \
    ["\ufffd", "\u0378", "\u2e7f", "\U0001FAFF", "\U000E0041", "\u0001", "\u001b", "\u0085"]
CODE = ["def {w}(x, y=None):\n    return [i ** 2 for i in range({n})]\n",
        "for (int {w} = 0; {w} < {n}; {w}++) {{\n\tsum += a[{w}];\n}}\n",
        "const {w} = async () => {{ await fetch('/api/{w}?n={n}'); }};",
        '{{"{w}": {n}, "list": [{n}, "{w}"], "ok": true}}',
        "<div id=\"{w}\"><span>{n}</span></div>", "#include <stdio.h>\n#define N {n}\n",
        "$ grep -rn '{w}' src/ | wc -l  # {n}", "| {w} | {n} |\n|---|---|\n",
        "fn {w}(v: &[u32]) -> u64 {{ v.iter().map(|x| *x as u64).sum() }}",
        "SELECT {w}, COUNT(*) FROM t GROUP BY {w} HAVING COUNT(*) > {n};"]


def gen_script_text(rng):
    name = rng.choice(sorted(SCRIPTS))
    words = rand_words(rng, SCRIPTS[name], rng.randint(1, 12))
    seps = [" "] * 6 + [", ", ". ", "\n", "  ", "\t", "! ", "? ", ""]
    return ''.join(w + rng.choice(seps) for w in words).rstrip(" ") if rng.random() < 0.5 else \
        ''.join(w + rng.choice(seps) for w in words)


def gen_emoji(rng):
    parts = [rng.choice(EMOJI) for _ in range(rng.randint(1, 6))]
    glue = rng.choice(["", " ", " and ", "\n", "!"])
    return glue.join(parts) + rng.choice(["", " ok", "\u200d", "\ufe0f"])


def gen_whitespace(rng):
    out = ''.join(rng.choice(WHITESPACE) * rng.randint(1, 5) for _ in range(rng.randint(1, 8)))
    if rng.random() < 0.5:
        out = rng.choice(["a", "word", "x y", "\u4e2d"]) + out + rng.choice(["b", "", "end"])
    return out


def gen_code(rng):
    w = ''.join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(1, 10)))
    return rng.choice(CODE).format(w=w, n=rng.randint(0, 10 ** rng.randint(1, 9)))


def gen_number(rng):
    kind = rng.randint(0, 5)
    if kind == 0:
        return str(rng.randint(0, 10 ** rng.randint(1, 30)))
    if kind == 1:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}"
    if kind == 2:
        return f"{rng.random():e}"
    if kind == 3:
        return ' '.join(str(rng.randint(0, 999)) for _ in range(rng.randint(2, 10)))
    if kind == 4:
        return f"{rng.randint(1, 28)}/{rng.randint(1, 12)}/{rng.randint(1900, 2100)} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
    return "+" + str(rng.randint(1, 99)) + " " + str(rng.randint(10 ** 8, 10 ** 10))


def gen_rare(rng):
    s = ''.join(rng.choice(RARE) for _ in range(rng.randint(1, 6)))
    return rng.choice(["", "x", "a ", "\u4e00"]) + s + rng.choice(["", "y", " b"])


def gen_random_unicode(rng):
    out = []
    for _ in range(rng.randint(1, 20)):
        r = rng.random()
        if r < 0.3:
            c = rng.randint(0x20, 0x7E)
        elif r < 0.8:
            c = rng.randint(0xA0, 0xFFFD)
        else:
            c = rng.randint(0x10000, 0x10FFFD)
        if 0xD800 <= c <= 0xDFFF or c == 0x2581:
            c = 0x41
        out.append(chr(c))
    return ''.join(out)


def gen_control_mix(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.4:
            parts.append(rng.choice(CONTROL))
        elif r < 0.8:
            parts.append(gen_script_text(rng) if rng.random() < 0.3 else rng.choice(["user", "model", "hi", " there", "x", "\n"]))
        else:
            parts.append(rng.choice(EMOJI))
    return ''.join(parts)


def gen_long_word(rng):
    base = rng.choice(["antidisestablishmentarianism", "Donaudampfschifffahrtsgesellschaft",
                       "pneumonoultramicroscopicsilicovolcanoconiosis", "\u0434\u043e\u0441\u0442\u043e\u043f\u0440\u0438\u043c\u0435\u0447\u0430\u0442\u0435\u043b\u044c\u043d\u043e\u0441\u0442\u044c",
                       "https://example.com/a/very/long/path?with=query&and=more#frag"])
    return base * rng.randint(1, 4) + rng.choice(["", "s", "ing", "!!!"])


def gen_paragraph(rng):
    return ' '.join(gen_script_text(rng) for _ in range(rng.randint(3, 10)))


GENERATORS = [gen_script_text] * 6 + [gen_emoji] * 2 + [gen_whitespace] * 2 + [gen_code] * 2 + \
    [gen_number, gen_rare, gen_random_unicode, gen_random_unicode, gen_control_mix, gen_control_mix,
     gen_long_word, gen_paragraph]


def make_corpus():
    rng = random.Random(20240401)
    generated = []
    while len(generated) < 1100:
        generated.append(rng.choice(GENERATORS)(rng).replace("\u2581", "_"))
    return HAND, generated


# ---- tokenizers ----------------------------------------------------------------------------

def gemma4_style(j):
    j = copy.deepcopy(j)
    vocab = j["model"]["vocab"]
    by_id = {v: k for k, v in vocab.items()}
    for a in j["added_tokens"]:
        if a["id"] in GEMMA4_CONTROL:
            new = GEMMA4_CONTROL[a["id"]]
            del vocab[by_id[a["id"]]]
            vocab[new] = a["id"]
            a["content"] = new
            a["special"] = True
    return j


def pair(j):
    """The tokenizer and its no-added-tokens twin (special == 0 mode)."""
    plain = copy.deepcopy(j)
    plain["added_tokens"] = []
    return Tokenizer.from_str(json.dumps(j)), Tokenizer.from_str(json.dumps(plain))


def roundtrips(tk, plain, s):
    a = tk.encode(s, add_special_tokens=False).ids
    b = plain.encode(s, add_special_tokens=False).ids
    return tk.decode(a, skip_special_tokens=False) == s and tk.decode(b, skip_special_tokens=False) == s, a, b


def main():
    assert tokenizers.__version__ == TOKENIZERS_VERSION, \
        f"goldens are pinned to tokenizers=={TOKENIZERS_VERSION}, found {tokenizers.__version__}"
    if sys.argv[1:] == ["--trained"]:
        return trained_golden()
    if len(sys.argv) != 2:
        sys.exit("usage: make_goldens.py PATH/TO/gemma3/tokenizer.json | --trained")
    g3_text = open(sys.argv[1], "rb").read()
    tiny_text = open(TINY, "rb").read()
    g3 = json.loads(g3_text)
    sets = [("gemma3", g3, hashlib.sha256(g3_text).hexdigest()),
            ("gemma4-style", gemma4_style(g3), hashlib.sha256(g3_text).hexdigest() + " (renamed)"),
            ("tiny", json.loads(tiny_text), hashlib.sha256(tiny_text).hexdigest())]
    toks = [(name, *pair(j), src) for name, j, src in sets]
    hand, generated = make_corpus()
    corpus, dropped = [], 0
    for s in hand + generated:
        ok = all(roundtrips(tk, plain, s)[0] for _, tk, plain, _ in toks)
        if not ok:
            assert s not in hand, f"hand-written corpus string does not round-trip: {s!r}"
            dropped += 1
            continue
        corpus.append(s)
    with open(os.path.join(HERE, "corpus.txt"), "w", encoding="ascii", newline="\n") as f:
        for s in corpus:
            f.write(json.dumps(s, ensure_ascii=True) + "\n")
    for name, tk, plain, src in toks:
        with open(os.path.join(HERE, f"golden_{name}.txt"), "w", encoding="ascii", newline="\n") as f:
            f.write(f"# tokenizers {TOKENIZERS_VERSION}; {name}; tokenizer.json sha256 {src}\n")
            for s in corpus:
                _, a, b = roundtrips(tk, plain, s)
                f.write(' '.join(map(str, a)) + "\t" + ' '.join(map(str, b)) + "\n")
    print(f"{len(corpus)} corpus strings ({dropped} generated ones dropped: no round trip)")


def trained_golden():
    """golden_trained.txt over the corpus as committed (the other goldens stay as they are)."""
    text = open(TRAINED, "rb").read()
    _, tk, plain = ("trained", *pair(json.loads(text)))
    with open(os.path.join(HERE, "corpus.txt"), encoding="ascii") as f:
        corpus = [json.loads(line) for line in f]
    with open(os.path.join(HERE, "golden_trained.txt"), "w", encoding="ascii", newline="\n") as f:
        f.write(f"# tokenizers {TOKENIZERS_VERSION}; trained; tokenizer.json sha256 "
                f"{hashlib.sha256(text).hexdigest()}\n")
        for s in corpus:
            ok, a, b = roundtrips(tk, plain, s)
            assert ok, f"corpus string does not round-trip in the trained tokenizer: {s!r}"
            f.write(' '.join(map(str, a)) + "\t" + ' '.join(map(str, b)) + "\n")
    print(f"golden_trained.txt: {len(corpus)} corpus strings")


if __name__ == "__main__":
    main()

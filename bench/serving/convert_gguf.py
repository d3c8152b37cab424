"""Converts bench/serving's Hugging Face model directory to GGUF with llama.cpp's own converter
(`convert_hf_to_gguf.py` and its `conversion` package and `gguf-py`, as llama-cpp-python's
sdist ships them under vendor/llama.cpp). Runs in the llama.cpp venv (torch, transformers).

The converter names a BPE tokenizer's pre-tokenizer by hashing how it splits a fixed text, and
knows only published models' hashes; the bench's tokenizer (the quickstart's, a 2048-token
vocabulary) is not one of them, so the converter stops with "BPE pre-tokenizer was not
recognized". Its split regex is Llama 3's, character for character, which llama.cpp calls
`llama-bpe`: when the hash is unknown and tokenizer.json's regex is exactly that one, this
script answers `llama-bpe`; any other tokenizer still gets the converter's error. Everything
else (hyperparameters, tensor names, the q/k rotary permutation, vocabulary, merges, special
tokens) is the converter's own.

Usage: convert_gguf.py LLAMA_CPP_DIR MODEL_DIR OUT.gguf --outtype f32|f16|bf16
"""

import json
import sys
from pathlib import Path

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def split_regexes(tokenizer_json: Path) -> list[str]:
    pre = json.loads(tokenizer_json.read_text()).get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    return [s["pattern"]["Regex"] for s in steps
            if s.get("type") == "Split" and "Regex" in s.get("pattern", {})]


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    llama_cpp, model_dir, out = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    sys.path.insert(0, str(llama_cpp))
    import conversion.base as base  # noqa: E402 (the converter's package, from the sdist)
    import convert_hf_to_gguf  # noqa: E402

    is_llama3_split = split_regexes(model_dir / "tokenizer.json") == [LLAMA3_SPLIT]
    original = base.TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer):
        try:
            return original(self, tokenizer)
        except NotImplementedError:
            if not is_llama3_split:
                raise
            base.logger.info("unknown BPE hash; tokenizer.json splits with Llama 3's regex: llama-bpe")
            return "llama-bpe"

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre
    sys.argv = [str(llama_cpp / "convert_hf_to_gguf.py"), str(model_dir), "--outfile", out,
                *sys.argv[4:]]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()

"""Writes bench/serving's Llama model (HF directory: config.json, model.safetensors,
tokenizer.json with a Llama-3-style byte-level BPE) as a GGUF file for llama.cpp, f32 tensors,
with gguf-py's writer. Runs in the llama.cpp venv (gguf, numpy, safetensors).

GGUF's llama layout differs from Hugging Face's in one place: the rows of q_proj and k_proj
are ordered for interleaved rotary pairs, so they are permuted back here (per head: the two
halves of the head dimension interleaved).

Usage: to_gguf.py MODEL_DIR OUT.gguf
"""

import json
import sys
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

model_dir, out = Path(sys.argv[1]), sys.argv[2]
cfg = json.loads((model_dir / "config.json").read_text())
tok = json.loads((model_dir / "tokenizer.json").read_text())
tensors = {}
for f in sorted(model_dir.glob("*.safetensors")):
    tensors.update(load_file(str(f)))

n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
hidden = cfg["hidden_size"]
head_dim = cfg.get("head_dim") or hidden // n_head


def interleave_rows(w: np.ndarray, heads: int) -> np.ndarray:
    return (w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


w = gguf.GGUFWriter(out, "llama")
w.add_name("bench-serving")
w.add_context_length(cfg["max_position_embeddings"])
w.add_embedding_length(hidden)
w.add_block_count(cfg["num_hidden_layers"])
w.add_feed_forward_length(cfg["intermediate_size"])
w.add_rope_dimension_count(head_dim)
w.add_head_count(n_head)
w.add_head_count_kv(n_kv)
w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
w.add_file_type(gguf.LlamaFileType.ALL_F32)

# Vocabulary: every id in order, added (special) tokens marked as control tokens.
vocab = dict(tok["model"]["vocab"])
special = {}
for a in tok.get("added_tokens", []):
    vocab[a["content"]] = a["id"]
    if a.get("special"):
        special[a["id"]] = a["content"]
size = cfg["vocab_size"]
by_id = {i: t for t, i in vocab.items()}
tokens, types = [], []
for i in range(size):
    t = by_id.get(i, f"[PAD{i}]")
    tokens.append(t)
    types.append(gguf.TokenType.CONTROL if i in special or i not in by_id else gguf.TokenType.NORMAL)
merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"].get("merges", [])]
w.add_vocab_size(size)
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("llama-bpe")  # the Llama-3 split regex, which tokenizer.json uses
w.add_token_list(tokens)
w.add_token_types(types)
w.add_token_merges(merges)
w.add_bos_token_id(cfg["bos_token_id"])
w.add_eos_token_id(cfg["eos_token_id"])
if cfg.get("pad_token_id") is not None:
    w.add_pad_token_id(cfg["pad_token_id"])
w.add_add_bos_token(False)

names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
         "lm_head.weight": "output.weight"}
per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
for name, t in tensors.items():
    t = t.astype(np.float32)
    if name in names:
        new = names[name]
    else:
        parts = name.split(".")  # model.layers.N.<module...>.weight
        layer, module = parts[2], ".".join(parts[3:-1])
        new = f"blk.{layer}.{per_layer[module]}.weight"
        if module == "self_attn.q_proj":
            t = interleave_rows(t, n_head)
        elif module == "self_attn.k_proj":
            t = interleave_rows(t, n_kv)
    w.add_tensor(new, np.ascontiguousarray(t))

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

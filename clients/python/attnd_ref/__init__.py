"""attnd_ref — recompute what attnd computes, in numpy: the seeded inputs bit for bit, the
output fingerprint, and the fp64 reference that `verify` compares against."""

from .gen import (
    TOLERANCES,
    bf16_bits_to_f32,
    compare,
    fingerprint,
    fingerprint_hex,
    generate,
    inputs,
    mix64,
    reference_attention,
    round_bf16_bits,
    round_fp16_bits,
    tensor_key,
    to_float64,
    values_f32,
    visible_keys,
)

__all__ = [
    "TOLERANCES",
    "bf16_bits_to_f32",
    "compare",
    "fingerprint",
    "fingerprint_hex",
    "generate",
    "inputs",
    "mix64",
    "reference_attention",
    "round_bf16_bits",
    "round_fp16_bits",
    "tensor_key",
    "to_float64",
    "values_f32",
    "visible_keys",
]

"""Writes q8_0_ref.json.gz: ggml's quantize_row_q8_0_ref and
dequantize_row_q8_0 run on fixed inputs through ctypes, from the prebuilt
libggml-base.so of npm @node-llama-cpp/linux-x64@3.22.1 (llama.cpp v0.5.0).

usage: python3 make_q8_0.py PATH/TO/libggml-base.so
"""
import base64, ctypes, gzip, json, struct, sys
import random

lib = ctypes.CDLL(sys.argv[1])
lib.quantize_row_q8_0_ref.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
lib.dequantize_row_q8_0.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def case(name, kind, xs, n_per_row):
    n = len(xs)
    src = (ctypes.c_float * n)(*xs)
    dst = (ctypes.c_uint8 * (n // 32 * 34))()
    out = (ctypes.c_float * n)()
    for r in range(n // n_per_row):
        lib.quantize_row_q8_0_ref(ctypes.byref(src, 4 * r * n_per_row), ctypes.byref(dst, r * n_per_row // 32 * 34), n_per_row)
    lib.dequantize_row_q8_0(dst, out, n)
    return {
        "name": name, "kind": kind, "type": "Q8_0", "recipe": "q8_0_ref",
        "n_per_row": n_per_row, "nrows": n // n_per_row,
        "input_f32_b64": base64.b64encode(struct.pack("<%df" % n, *xs)).decode(),
        "expected_b64": base64.b64encode(bytes(dst)).decode(),
        "dequant_f32_b64": base64.b64encode(struct.pack("<%df" % n, *out)).decode(),
    }


rng = random.Random(8)
cases = []
cases.append(case("gauss_4x256", "gauss", [f32(rng.gauss(0, 1)) for _ in range(1024)], 256))
for scale in (1e-30, 1e-6, 1e3, 1e7, 1e37):
    cases.append(case("gauss_scaled_%g" % scale, "scaled", [f32(rng.gauss(0, 1) * scale) for _ in range(256)], 256))
# exact ties: amax 127 makes d = 1, so k + 0.5 rounds away from zero
cases.append(case("ties", "ties", [127.0, -127.0] + [(k - 15) + 0.5 for k in range(30)] + [f32(rng.uniform(-127, 127)) for _ in range(32)], 64))
cases.append(case("zeros_and_signed_zeros", "zeros", [0.0] * 32 + [-0.0] * 32, 32))
cases.append(case("subnormals", "subnormal", [f32(rng.uniform(-1, 1) * 1e-40) for _ in range(64)], 64))
cases.append(case("outlier", "outlier", [f32(rng.gauss(0, 0.01)) for _ in range(31)] + [50.0] + [f32(rng.gauss(0, 0.01)) for _ in range(32)], 64))
cases.append(case("bf16_values", "bf16", [struct.unpack("<f", struct.pack("<I", (rng.getrandbits(16) & 0xBFFF) << 16))[0] for _ in range(512)], 512))
with gzip.open("q8_0_ref.json.gz", "wt") as f:
    json.dump(cases, f, indent=1)

// DeepSeek-V4's own operations (trace/v4's DeviceOps): the activation
// fake-quantisers, the Walsh-Hadamard rotation and sparse attention with a
// per-head sink. Each follows the host function of trace/v4 op for op,
// rounding every product and sum to float32 as it does; only the order of
// the attention's dot products differs.

#define V4_EACH(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// pow2_ceil is kernel.py's fast_round_scale: 2^ceil(log2(x)) from the
// bits of x (its exponent, plus one if any mantissa bit is set).
__device__ float pow2_ceil(float x) {
    unsigned b = __float_as_uint(x);
    int e = (int)((b >> 23) & 0xffu) - 127;
    if (b & 0x7fffffu) e++;
    return __uint_as_float((unsigned)(e + 127) << 23);
}

// round_e4m3 rounds v (|v| <= 448) to the nearest E4M3 value, ties to
// even: the spacing is 2^-9 below 2^-6, else 2^(exponent-3).
__device__ float round_e4m3(float v) {
    float a = fabsf(v);
    float q = 0.001953125f;
    if (a >= 0.015625f) {
        int e;
        frexpf(a, &e); // a = f·2^e, f in [0.5, 1)
        q = ldexpf(1.0f, e - 4);
    }
    return copysignf(__fmul_rn(rintf(__fdiv_rn(a, q)), q), v);
}

// round_e2m1 rounds v (|v| <= 6) to the nearest E2M1 value, ties to the
// even code.
__device__ float round_e2m1(float v) {
    float a = fabsf(v);
    float q = a >= 4.0f ? 2.0f : a >= 2.0f ? 1.0f : 0.5f;
    return copysignf(__fmul_rn(rintf(__fdiv_rn(a, q)), q), v);
}

// act_quant fake-quantises x [rows, cols] (row stride ldx) in place, one
// thread per block of block values along a row: amax = max(|x|, floor),
// s = 2^ceil(log2(amax / fmax)), x = round(clamp(x / s, ±fmax)) · s, with
// E4M3 (fmax 448, floor 1e-4) or, when fp4, E2M1 (fmax 6, floor 6·2^-126).
extern "C" __global__ void act_quant(float* x, int ldx, int rows, int cols, int block, int fp4) {
    int per = cols / block;
    float fmax = fp4 ? 6.0f : 448.0f;
    float inv = fp4 ? (float)(1.0 / 6.0) : (float)(1.0 / 448.0);
    float floor = fp4 ? ldexpf(6.0f, -126) : 1e-4f;
    V4_EACH(i, (long long)rows * per) {
        float* p = x + (i / per) * ldx + (i % per) * block;
        float amax = floor;
        for (int j = 0; j < block; j++) amax = fmaxf(amax, fabsf(p[j]));
        float s = pow2_ceil(__fmul_rn(amax, inv));
        for (int j = 0; j < block; j++) {
            float v = fminf(fmaxf(__fdiv_rn(p[j], s), -fmax), fmax);
            p[j] = __fmul_rn(fp4 ? round_e2m1(v) : round_e4m3(v), s);
        }
    }
}

// hadamard_rows applies the Walsh-Hadamard transform in Sylvester order to
// row blockIdx.x of x (n values, a power of two; row stride ldx) in place,
// as float32 butterflies stage by stage, then multiplies by scale.
extern "C" __global__ void hadamard_rows(float* x, int ldx, int n, float scale) {
    float* row = x + (long long)blockIdx.x * ldx;
    for (int h = 1; h < n; h <<= 1) {
        for (int p = threadIdx.x; p < n / 2; p += blockDim.x) {
            int i = p / h * 2 * h + p % h;
            float a = row[i], b = row[i + h];
            row[i] = __fadd_rn(a, b);
            row[i + h] = __fsub_rn(a, b);
        }
        __syncthreads();
    }
    for (int j = threadIdx.x; j < n; j += blockDim.x) row[j] = __fmul_rn(row[j], scale);
}

// v4_block_sum returns the sum of v over the block to every thread.
// blockDim.x is a multiple of 32.
__device__ float v4_block_sum(float v) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); // part may still be read by a previous call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// sparse_attn_sink is kernel.py's sparse_attn for row blockIdx.x = t·heads
// + h of q and out [T·heads, d]: over the rows idx[t·k .. t·k+k) of kv
// [rows, d] (K = V; -1 = none), softmax(scale · q·k) with the head's sink
// logit (unscaled) in the denominator, times the values. The scores are
// computed twice (for the maximum, then the weights) rather than kept, so
// that k has no bound.
extern "C" __global__ void sparse_attn_sink(float* out, const float* q, const float* kv, const float* sink,
                                            const int* idx, int k, int heads, int d, float scale) {
    int t = blockIdx.x / heads, h = blockIdx.x % heads;
    const float* qr = q + (long long)blockIdx.x * d;
    const int* ids = idx + (long long)t * k;
    float mx = __int_as_float(0xff800000);
    for (int j = 0; j < k; j++) {
        int r = ids[j];
        if (r < 0) continue;
        const float* kr = kv + (long long)r * d;
        float s = 0.0f;
        for (int c = threadIdx.x; c < d; c += blockDim.x) s = fmaf(qr[c], kr[c], s);
        mx = fmaxf(mx, __fmul_rn(v4_block_sum(s), scale));
    }
    // Every thread holds mx; each now sums the weights in index order, as
    // the host does, and accumulates its own channels.
    float* o = out + (long long)blockIdx.x * d;
    for (int c = threadIdx.x; c < d; c += blockDim.x) o[c] = 0.0f;
    float sum = 0.0f;
    for (int j = 0; j < k; j++) {
        int r = ids[j];
        if (r < 0) continue;
        const float* kr = kv + (long long)r * d;
        float s = 0.0f;
        for (int c = threadIdx.x; c < d; c += blockDim.x) s = fmaf(qr[c], kr[c], s);
        float p = (float)exp((double)(__fmul_rn(v4_block_sum(s), scale) - mx));
        sum = __fadd_rn(sum, p);
        for (int c = threadIdx.x; c < d; c += blockDim.x) o[c] = __fadd_rn(o[c], __fmul_rn(p, kr[c]));
    }
    sum = __fadd_rn(sum, (float)exp((double)(sink[h] - mx)));
    for (int c = threadIdx.x; c < d; c += blockDim.x) o[c] = __fdiv_rn(o[c], sum);
}

// Elementwise operations on float32 matrices given by a pointer to their
// first element and a row stride, and the bfloat16 conversions that feed
// cuBLAS's bf16 products.

#define EACH(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// add2d sets d = a + b over [rows, cols].
extern "C" __global__ void add2d(float* d, int ldd, const float* a, int lda, const float* b, int ldb, int rows, int cols) {
    EACH(i, (long long)rows * cols) {
        long long r = i / cols, c = i % cols;
        d[r * ldd + c] = a[r * lda + c] + b[r * ldb + c];
    }
}

// copy2d sets d = s over [rows, cols].
extern "C" __global__ void copy2d(float* d, int ldd, const float* s, int lds, int rows, int cols) {
    EACH(i, (long long)rows * cols) {
        long long r = i / cols, c = i % cols;
        d[r * ldd + c] = s[r * lds + c];
    }
}

// silu_mul sets d = silu(g) · u over [rows, cols]; d may be g or u.
extern "C" __global__ void silu_mul(float* d, int ldd, const float* g, int ldg, const float* u, int ldu, int rows, int cols) {
    EACH(i, (long long)rows * cols) {
        long long r = i / cols, c = i % cols;
        float x = g[r * ldg + c];
        d[r * ldd + c] = __fmul_rn(x / (1.0f + expf(-x)), u[r * ldu + c]);
    }
}

// bf16_to_f32 widens n bfloat16 values (raw bits) to float32, exactly.
extern "C" __global__ void bf16_to_f32(float* d, const unsigned short* s, long long n) {
    EACH(i, n) d[i] = __uint_as_float((unsigned int)s[i] << 16);
}

// f32_to_bf16 rounds [rows, cols] float32 values to bfloat16 bits, to
// nearest even (NaNs stay NaN), into d with row stride ldd.
extern "C" __global__ void f32_to_bf16(unsigned short* d, int ldd, const float* s, int lds, int rows, int cols) {
    EACH(i, (long long)rows * cols) {
        long long r = i / cols, c = i % cols;
        unsigned int u = __float_as_uint(s[r * lds + c]);
        unsigned int h = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        d[r * ldd + c] = (unsigned short)h;
    }
}

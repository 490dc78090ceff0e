// Rotary position embedding in DeepSeek's interleaved layout: the pairs
// (x[2i], x[2i+1]) of a row are complex numbers rotated by the angle whose
// cos and sin the host computed (YaRN-corrected frequencies, model.RopeTables).

// rope rotates rows [rows, 2·half] of x (row stride ld) in place. Row r
// uses row r/group of the tables cs and sn [rows/group, half]: the heads of
// one token share its position.
extern "C" __global__ void rope(float* x, int ld, int rows, int half, const float* cs, const float* sn, int group) {
    long long n = (long long)rows * half;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        int r = (int)(i / half), k = (int)(i % half);
        long long p = (long long)(r / group) * half + k;
        float c = cs[p], s = sn[p];
        float* v = x + (long long)r * ld + 2 * k;
        float a = v[0], b = v[1];
        // Rounded products, no fused multiply-add: the complex product as
        // the reference and the CPU backend evaluate it.
        v[0] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        v[1] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
    }
}

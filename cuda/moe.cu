// Token permutation for the routed experts: gather the rows of the tokens
// an expert serves, and add its weighted output back to their rows.

#define EACH(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// gather_rows copies row idx[i] of s into row i of d, for i < rows.
extern "C" __global__ void gather_rows(float* d, int ldd, const float* s, int lds, const int* idx, int rows, int cols) {
    EACH(i, (long long)rows * cols) {
        long long r = i / cols, c = i % cols;
        d[r * ldd + c] = s[(long long)idx[r] * lds + c];
    }
}

// scatter_add_rows adds scale[i] times row i of s to row idx[i] of d. The
// product is rounded before the sum, as y[idx] += out · w does in torch;
// rows repeated in idx are summed atomically.
extern "C" __global__ void scatter_add_rows(float* d, int ldd, const float* s, int lds, const int* idx, const float* scale, int rows, int cols) {
    EACH(i, (long long)rows * cols) {
        long long r = i / cols, c = i % cols;
        atomicAdd(d + (long long)idx[r] * ldd + c, __fmul_rn(s[r * lds + c], scale[r]));
    }
}

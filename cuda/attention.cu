// The softmax of MLA attention. The score and value products run through
// cuBLAS; this kernel turns one chunk of scores into causal attention
// weights in place.

__device__ float blockReduce(float v, bool isMax) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = isMax ? fmaxf(v, u) : v + u;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); // part may still be read by a previous call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    float id = isMax ? __int_as_float(0xff800000) : 0.0f;
    v = lane < (int)(blockDim.x >> 5) ? part[lane] : id;
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = isMax ? fmaxf(v, u) : v + u;
    }
    return v;
}

// softmax_causal replaces row blockIdx.x of s (row stride ld, cols keys)
// with softmax(scale · row) over the keys its token may see and zeros past
// them. Rows are (token, head) pairs: row row0 + blockIdx.x belongs to token
// (row0 + blockIdx.x) / heads of the sequence, which sees keys 0..token.
extern "C" __global__ void softmax_causal(float* s, int ld, int cols, int heads, int row0, float scale) {
    float* row = s + (long long)blockIdx.x * ld;
    int n = (row0 + (int)blockIdx.x) / heads + 1;
    if (n > cols) n = cols;
    float mx = __int_as_float(0xff800000);
    for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, __fmul_rn(row[j], scale));
    mx = blockReduce(mx, true);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        float e = expf(__fmul_rn(row[j], scale) - mx);
        row[j] = e;
        sum += e;
    }
    sum = blockReduce(sum, false);
    for (int j = threadIdx.x; j < n; j += blockDim.x) row[j] = row[j] / sum;
    for (int j = n + threadIdx.x; j < cols; j += blockDim.x) row[j] = 0.0f;
}

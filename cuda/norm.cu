// RMSNorm of the rows of a float32 matrix, as DeepSeek's reference computes
// it in float32: x · 1/sqrt(mean(x²) + eps) · weight.

// blockSum returns the sum of v over the block to every thread. blockDim.x
// is a multiple of 32.
__device__ float blockSum(float v) {
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

// rmsnorm normalises row blockIdx.x of x [rows, cols] (row stride ldx)
// into dst (row stride ldd); dst may be x. The scale is taken in double and
// each product rounded, as the CPU backend does.
extern "C" __global__ void rmsnorm(float* dst, int ldd, const float* x, int ldx, const float* w, int cols, float eps) {
    const float* xr = x + (long long)blockIdx.x * ldx;
    float* dr = dst + (long long)blockIdx.x * ldd;
    float s = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) s = fmaf(xr[j], xr[j], s);
    s = blockSum(s);
    float r = (float)(1.0 / sqrt((double)(s / (float)cols + eps)));
    // Each thread writes only the elements it read, after every read of
    // the sum above, so dst may alias x.
    for (int j = threadIdx.x; j < cols; j += blockDim.x) dr[j] = __fmul_rn(__fmul_rn(xr[j], r), w[j]);
}

// task: softmax_rows
// expect: mismatch
// note: one 256-thread block per row. The max reduction is correct; for the sum, thread 0 adds
// note: the 256 partials and stores the total in red[0], but there is no __syncthreads() before
// note: everyone reads red[0]. Thread 0's serial 256-term loop takes thousands of cycles, while
// note: warps 1..7 read red[0] right after the barrier: they get thread 0's own partial (written
// note: before the barrier), not the total, on every launch. Their elements come out several times
// note: too large, so checked launch 1 already fails: mismatch (not a flaky nondeterministic).
// message: first launch
// kforge: grid = [rows]
// kforge: block = [256]
#define THREADS 256

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols)
{
    __shared__ float red[THREADS];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    if (row >= rows || cols <= 0) {
        return;
    }
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;

    float mx = -3.402823466e38f;
    for (int j = tid; j < cols; j += THREADS) {
        mx = fmaxf(mx, xr[j]);
    }
    red[tid] = mx;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) {
            red[tid] = fmaxf(red[tid], red[tid + s]);
        }
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();

    float sum = 0.0f;
    for (int j = tid; j < cols; j += THREADS) {
        sum += expf(xr[j] - mx);
    }
    red[tid] = sum;
    __syncthreads();
    if (tid == 0) {
        float total = 0.0f;
        for (int i = 0; i < THREADS; ++i) {
            total += red[i];
        }
        red[0] = total;
    }
    // BUG: a __syncthreads() is missing here
    float inv = 1.0f / red[0];
    for (int j = tid; j < cols; j += THREADS) {
        yr[j] = expf(xr[j] - mx) * inv;
    }
}

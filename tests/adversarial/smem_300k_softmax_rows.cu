// task: softmax_rows
// expect: launch_config
// note: caches a whole row in dynamic shared memory and asks for 300000 bytes of it in the kforge
// note: header. Hopper's opt-in maximum is 227 KiB (232448 bytes) per block, so the worker's
// note: launch-limit check refuses the launch -> launch_config. The kernel itself is correct for
// note: rows of up to 75000 floats and compiles.
// message: 300000 bytes
// kforge: grid = [rows]
// kforge: block = [256]
// kforge: shared_mem = 300000
#define THREADS 256

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols)
{
    extern __shared__ float row_buf[];
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
        float v = xr[j];
        row_buf[j] = v;
        mx = fmaxf(mx, v);
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
        float e = expf(row_buf[j] - mx);
        row_buf[j] = e;
        sum += e;
    }
    red[tid] = sum;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) {
            red[tid] += red[tid + s];
        }
        __syncthreads();
    }
    float inv = 1.0f / red[0];
    for (int j = tid; j < cols; j += THREADS) {
        yr[j] = row_buf[j] * inv;
    }
}
